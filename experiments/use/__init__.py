"""Using a finished run: load it, sample from it, evaluate it, export it.

    load.py       load_run(run_dir) -> (model, tokenizer, cfg); load_run_tokenizer, open_run_dir, check_device
    sample.py     `python -m experiments.sample`
    evaluate/     `python -m experiments.evaluate`
    export.py     `python -m experiments.export`;  export_dir.py  its --out dir (manifest, checks, atomic moves)
"""
