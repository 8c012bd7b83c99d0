"""archlab's SLURM launcher as a Hydra plugin (`hydra/launcher=slurm`, conf/hydra/launcher/slurm.yaml).

Hydra instantiates plugins only from the `hydra_plugins` namespace package, so the class Hydra sees lives here; what
it adds to hydra-submitit-launcher is experiments/sweep/slurm.py (waiting, recording) and experiments/sweep/requeue.py
(requeue on SLURM's warning signal). docs/cluster.md says how to use it.
"""
