"""`python -m memplane_operator`: the same as `memplane-operator`."""

import sys

from memplane_operator.cli import main

sys.exit(main())
