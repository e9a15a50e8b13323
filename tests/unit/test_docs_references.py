"""Every reference from code, tests, benches, scripts, protos and the chart to a page of the
documentation resolves: written in one form, `docs/<page>.md` or `README.md`, optionally
with `#<anchor>` (the heading's id on the site: MkDocs' toc slug), the file exists and has a
heading with that anchor. The old forms that named a README heading in quotes ("README,
'Search speed'") are refused, since nothing could check them (some named headings that no
longer existed). Links between the pages themselves are checked by `mkdocs build --strict`."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from markdown.extensions.toc import slugify

from tests.docs_text import REPO, headings, read

SCANNED = ("services", "operator", "tests", "bench", "scripts", "proto", "charts")
SUFFIXES = {".py", ".pyi", ".proto", ".sh", ".yaml", ".yml", ".json", ".tpl", ".txt", ".toml", ".md"}
REFERENCE = re.compile(r"(?<![\w./-])(docs/[\w./-]+?\.md|README\.md)(?:#([\w-]+))?")
# A README heading named in quotes, "see README", or "README: Heading" (the forms before docs/).
OLD_FORM = re.compile(r"""\bREADME\b(?!\.md)(?:[,:]?[\s#/*"]*(?:recall\s+)?["'“]|:\s+[A-Z])|\bsee README\b(?!\.md)""")
NOT_OURS = ("mem0ai",)  # mem0's own README, which its quick-start test quotes


def _files() -> list[Path]:
    found = [REPO / "README.md"]
    for top in SCANNED:
        found += [
            path
            for path in (REPO / top).rglob("*")
            if path.suffix in SUFFIXES and path.is_file() and "__pycache__" not in path.parts
        ]
    return found


def _plain(title: str) -> str:
    """A heading's text as the site renders it: links to their text, code without backticks."""
    return re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title).replace("`", "")


@cache
def anchors(page: str) -> frozenset[str]:
    """The ids MkDocs gives the headings of *page* (a repeated slug gets _1, _2, ...)."""
    seen: dict[str, int] = {}
    ids = set()
    for _level, title in headings(read(page)):
        slug = slugify(_plain(title), "-")
        count = seen.get(slug, 0)
        ids.add(slug if count == 0 else f"{slug}_{count}")
        seen[slug] = count + 1
    return frozenset(ids)


def references() -> list[tuple[str, int, str, str | None]]:
    """(file, line, page, anchor) of every reference to a documentation page."""
    found = []
    for path in _files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for match in REFERENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append((str(path.relative_to(REPO)), line, match[1], match[2]))
    return found


def test_every_reference_names_a_page_and_a_heading_that_exist() -> None:
    refs = references()
    assert len(refs) > 20  # the scan finds the references (settings, embedders, tests, chart)
    broken = []
    for where, line, page, anchor in refs:
        if not (REPO / page).is_file():
            broken.append(f"{where}:{line}: {page} does not exist")
        elif anchor is not None and anchor not in anchors(page):
            broken.append(f"{where}:{line}: {page} has no heading #{anchor}")
    assert not broken, "\n".join(broken)


def test_no_reference_names_a_readme_heading_in_the_old_form() -> None:
    old = []
    for path in _files():
        if path == Path(__file__):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for match in OLD_FORM.finditer(text):  # over the whole text: a reference may span lines
            start = text.rfind("\n", 0, match.start()) + 1
            line = text[start : text.find("\n", match.end()) % (len(text) + 1)]
            if not any(word in line for word in NOT_OURS):
                old.append(f"{path.relative_to(REPO)}:{text.count(chr(10), 0, match.start()) + 1}: {line.strip()}")
    assert not old, "write these as docs/<page>.md#<anchor>:\n" + "\n".join(old)


def test_the_anchor_rule_is_the_sites() -> None:
    # The ids MkDocs gave these headings when the site was built.
    assert "long-memories" in anchors("docs/explanation/retrieval.md")
    assert "recall-without-an-llm" in anchors("docs/explanation/retrieval.md")
    assert "on-kubernetes" in anchors("README.md")
    assert "picking-memory-files-for-a-query-selectmemoryfiles" in anchors("docs/guides/sandboxes.md")
