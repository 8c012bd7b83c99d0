"""Shared test fixtures: offline environment and the optional ../shared/data directory.

Torch computes on one thread in tests (OMP_NUM_THREADS=1 unless the caller sets it): the tests' models are tiny,
and a second OpenMP thread only adds synchronisation, which on a loaded 2-core machine (another process on the
other core) costs milliseconds per operator: tests/arch took ~490 s instead of ~37 s. What a thread count changes
in the product (train.num_threads, a SLURM job's cpus_per_task) sets it explicitly and is tested that way.

`make test` runs the tests on every core (pytest-xdist, `TEST_WORKERS=auto`) with a 300 s timeout per test
(pytest-timeout, pyproject.toml): a test that hangs fails with its stacks instead of eating CI's time.

Tests that need the shared corpora (`../shared/data`, present in CI beside the clone) use the `shared_data`
fixture and skip with a clear reason on a user's fresh clone where it is absent.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Never reach the network from tests, never block on wandb.
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Read by torch when it is first imported, which is after this file (pytest loads it before any test module).
os.environ.setdefault("OMP_NUM_THREADS", "1")

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("ARCHLAB_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`make test` runs `-n auto --dist loadgroup`) the `slurm` tests share one worker: they
    share one local cluster, which their session fixture starts and stops. They go first: as one unit of work (~2
    minutes, mostly waiting on the cluster) reached late, one worker ran them while the other had finished."""
    slurm = [item for item in items if item.get_closest_marker("slurm")]
    for item in slurm:
        item.add_marker(pytest.mark.xdist_group("slurm"))
    first = set(slurm)
    items[:] = slurm + [item for item in items if item not in first]


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Path to ../shared/data; skips the test when it is absent (a user's fresh clone)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared test data not found at {SHARED_DATA} (set ARCHLAB_SHARED_DATA or place it beside the clone)")
    return SHARED_DATA
