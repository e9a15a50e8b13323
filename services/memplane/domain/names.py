"""The shape of a workspace name, with no other import: the sandbox backends (and through
them the operator, which must not load the services' settings) check names with it."""

from __future__ import annotations

import re

# 1-63 of a-z, 0-9 and '-', starting with a letter, not ending with '-' (a DNS label);
# \Z: "$" would accept a trailing newline.
WORKSPACE_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?\Z")
