"""`python -m memplane` runs the CLI."""

import sys

from memplane.cli.main import main

sys.exit(main())
