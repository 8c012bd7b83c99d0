"""Using a finished run: load it, sample from it, evaluate it, export it.

    load.py       load_run(run_dir) -> (model, tokenizer, cfg)
    sample.py     `python -m experiments.sample`
    evaluate/     `python -m experiments.evaluate`
    export.py     `python -m experiments.export`
"""
