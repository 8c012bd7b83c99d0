"""archlab's experiment runner: Hydra-configured training, sweeps and run comparison, and using a finished run.

The only package that imports Hydra and wandb. Submodules are imported lazily by their entry points
(`python -m experiments.train`, `python -m experiments.compare`, ...), so `import experiments` is cheap;
`experiments.load_run` is the one name exported here (imported on first use).
"""


def __getattr__(name: str):
    if name == "load_run":
        from experiments.use.load import load_run

        return load_run
    raise AttributeError(f"module 'experiments' has no attribute {name!r}")
