"""The speed half of rmsnorm_vs_layernorm_v2: time per training step of the finding's model with LayerNorm and with
RMSNorm, both through torch.compile (inductor), so that both norms run kernels generated the same way.

    result = measure_norms(shape={"d_model": 128, "layers": 4, ...}, repeats=5, calls=10)
    result["measurable"], result["rounds"], result["ratio"], result["ratio_ci"]   # rmsnorm / layernorm step time

The timing is bench/bench_norms.py's (loaded from the checkout by path: `step_call(args, norm, compiled=True)` and
`timed`): forward + loss + backward + AdamW step of one fixed batch, after warm-up (compiling included), in
`repeats` interleaved rounds of `calls` steps. Per round, ratio = rmsnorm's time / layernorm's (the two timed back
to back); the result is exp(mean log ratio) with the 95% t-interval over the rounds, exponentiated (< 1: RMSNorm is
faster). Where that cannot be measured (no bench/bench_norms.py, as in an installed package; inductor without a
working C++ compiler), `measurable` is False and `reason` says why: the finding then declares the speed half not
measurable here, never falls back to torch's unfused eager `rms_norm` against the fused `layer_norm`.
Not handled: GPUs (the machine the findings command runs on), timing noise from other processes (interleaving
spreads it over both norms; the interval shows what is left).
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_norms.py"
NORMS = ("layernorm", "rmsnorm")


def load_bench(path: Path = BENCH):
    """bench/bench_norms.py as a module (it puts the repo root on sys.path for its own imports)."""
    spec = importlib.util.spec_from_file_location("archlab_bench_norms", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def measure_norms(shape: dict[str, int], repeats: int = 5, calls: int = 10, threads: int = 1) -> dict[str, Any]:
    """Time both norms' compiled steps (module docstring); shape: d_model, layers, heads, n_ctx, batch, vocab."""
    from experiments.findings.evidence import mean_ci

    out: dict[str, Any] = {"what": "compiled model step (forward + loss + backward + AdamW), torch.compile",
                           "shape": dict(shape), "repeats": repeats, "calls": calls, "threads": threads}
    if not BENCH.is_file():
        return {**out, "measurable": False, "reason": f"{BENCH.name} is not in this checkout (bench/ is not installed)"}
    try:
        import torch

        bench = load_bench()
        args = bench.parse_args(["--d-model", str(shape["d_model"]), "--layers", str(shape["layers"]),
                                 "--heads", str(shape["heads"]), "--n-ctx", str(shape["n_ctx"]),
                                 "--batch", str(shape["batch"]), "--vocab", str(shape["vocab"]),
                                 "--threads", str(threads), "--repeats", str(repeats), "--calls", str(calls)])
        torch.set_num_threads(threads)
        t = bench.timed({norm: bench.step_call(args, norm, compiled=True) for norm in NORMS}, calls, repeats)
    except Exception as e:  # inductor without a C++ compiler, a changed bench: not measurable, with the reason
        why = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
        return {**out, "measurable": False,
                "reason": f"timing both steps compiled failed ({type(e).__name__}: {why})"}
    logs = [math.log(r / ln) for r, ln in zip(t["rmsnorm"], t["layernorm"])]  # per round
    mean, ci, n = mean_ci(logs)
    return {**out, "measurable": True, "seconds": {k: list(v) for k, v in t.items()},
            "rounds": [math.exp(v) for v in logs], "ratio": math.exp(mean),
            "ratio_ci": None if ci is None else [math.exp(ci[0]), math.exp(ci[1])], "n": n}
