"""`python -m experiments.evaluate RUN_DIR`: a finished run scored on its own or on new text (cli.py)."""
