"""The module `kopf run -m memplane_operator.main` loads: it reads the settings from the
environment and registers the handlers on kopf's default registry. Importing it is
starting the operator's configuration, hence its own module (nothing else here reads the
environment); `memplane-operator` (cli.py) does the same without kopf's CLI."""

from __future__ import annotations

import kopf

from memplane_operator.handlers import register
from memplane_operator.settings import OperatorSettings

register(kopf.get_default_registry(), OperatorSettings())
