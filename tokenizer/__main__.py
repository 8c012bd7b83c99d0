"""`python -m tokenizer ...` = the `bpe` command (see tokenizer/cli.py)."""

import sys

from tokenizer.cli import main

sys.exit(main())
