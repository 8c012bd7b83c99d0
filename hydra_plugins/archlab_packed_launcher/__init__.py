"""archlab's packed launcher as a Hydra plugin (`hydra/launcher=packed`, conf/hydra/launcher/packed.yaml).

Hydra instantiates plugins only from the `hydra_plugins` namespace package, so the class Hydra sees lives here; what
it does is experiments/sweep/packed_launch.py (grouping a sweep's jobs into packs) and experiments/run/pack.py
(training a pack). docs/gpu.md says how to use it.
"""
