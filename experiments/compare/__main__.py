"""`python -m experiments.compare ...`: see cli.py and docs/compare.md."""

import sys

from experiments.compare.cli import main

sys.exit(main())
