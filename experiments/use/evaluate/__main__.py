"""`python -m experiments.use.evaluate` = `python -m experiments.evaluate`: see cli.py."""

import sys

from experiments.use.evaluate.cli import main

sys.exit(main())
