"""`python -m memplane` runs the CLI."""

import sys

from memplane.cli.entry import main

sys.exit(main())
