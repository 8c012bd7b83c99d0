"""`python -m experiments.export ...`: a finished run as a Hugging Face model, or its tokenizer for tiktoken / HF
tokenizers.

The command lives in experiments/use/export.py; this module keeps the command's name short and stable (the docs, the
resume commands that runs print, and the findings call it).
"""

import sys

from experiments.use.export import main

if __name__ == "__main__":
    sys.exit(main())
