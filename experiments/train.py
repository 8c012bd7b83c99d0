"""`python -m experiments.train ...`: one training run, or a sweep with -m.

The command lives in experiments/run/train.py; this module keeps the command's name short and stable (the docs, the
resume commands that runs print, and the findings call it).
"""

from experiments.run.train import cli

if __name__ == "__main__":
    cli()
