"""archlab's tuned sweeper as a Hydra plugin (`hydra/sweeper=tuned`, conf/hydra/sweeper/tuned.yaml).

Hydra instantiates plugins only from the `hydra_plugins` namespace package, so the class Hydra sees lives here;
everything it does is experiments/sweep/tune.py (docs/tuning.md says how to use it).
"""
