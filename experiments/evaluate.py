"""`python -m experiments.evaluate ...`: a finished run's loss, perplexity, bits per byte and length
extrapolation.

The command lives in experiments/use/evaluate/; this module keeps the command's name short and stable (the docs, the
resume commands that runs print, and the findings call it).
"""

import sys

from experiments.use.evaluate.cli import main

if __name__ == "__main__":
    sys.exit(main())
