"""archlab's experiment runner: Hydra-configured training, sweeps and run comparison.

The only package that imports Hydra and wandb. Submodules are imported lazily by their entry points
(`python -m experiments.train`, `python -m experiments.compare`), so `import experiments` is cheap.
"""
