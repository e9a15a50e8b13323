"""`memplane-operator`'s command line: `--help` documents the environment variables it is
configured by (the command has no options of its own) and exits before anything connects;
any other argument is refused naming it (exit 2), instead of being ignored while kopf starts."""

import subprocess
import sys

from memplane_operator.settings import OperatorSettings


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    # No admin key and no cluster in the environment: were the command to go on, it would
    # fail on the key (exit 2, "admin key") or try to reach a cluster, never print the help.
    env = {"PATH": "/usr/bin:/bin"}
    return subprocess.run(  # noqa: S603 - this interpreter, fixed arguments
        [sys.executable, "-m", "memplane_operator", *args],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_help_lists_every_setting_by_its_variable() -> None:
    done = _run("--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: memplane-operator")
    for name, field in OperatorSettings.model_fields.items():
        assert f"MEMPLANE_OPERATOR_{name.upper()}" in done.stdout
        assert (field.description or "").split(".")[0] in done.stdout


def test_an_unknown_argument_is_refused_naming_it() -> None:
    done = _run("--namespace", "team-a")
    assert done.returncode == 2
    assert "unrecognized arguments: --namespace team-a" in done.stderr
    assert "admin key" not in done.stderr  # refused before the settings are read
