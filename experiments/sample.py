"""`python -m experiments.sample ...`: text from a trained run.

The command lives in experiments/use/sample.py; this module keeps the command's name short and stable (the docs, the
resume commands that runs print, and the findings call it).
"""

import sys

from experiments.use.sample import main

if __name__ == "__main__":
    sys.exit(main())
