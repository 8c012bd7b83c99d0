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
# tiktoken's load_tiktoken_bpe caches a file's contents under the sha1 of its *path* (in /tmp/data-gym-cache), and
# pytest's tmp paths repeat across sessions (pytest-0/popen-gw1/tt0/... once older basetemps are gone): a test then
# read another session's export from that cache (seen 2026-11-29: '0' -> 48 from a trained tokenizer's file where
# GPT-2's export gives 15). "" turns the cache off; the tests never download a tiktoken file.
os.environ["TIKTOKEN_CACHE_DIR"] = ""

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("ARCHLAB_SHARED_DATA", REPO_ROOT.parent / "shared" / "data"))


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the xdist_group marks into the test ids
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (`make test` runs `-n auto --dist loadgroup`) the `slurm` tests share one worker: they
    share one local cluster, which their session fixture starts and stops (marked after xdist had read the marks,
    they were spread over both workers: two fixtures raced to start the cluster, one skipped its tests, and the
    first worker done stopped the cluster under the other). They go first: as one unit of work (~2 minutes, mostly
    waiting on the cluster) reached late, one worker ran them while the other had finished. (xdist hands out the
    groups largest first, one per worker, before the single tests.)"""
    slurm = [item for item in items if item.get_closest_marker("slurm")]
    for item in slurm:
        item.add_marker(pytest.mark.xdist_group("slurm"))
    # The tests reading the session's tuned findings smoke (tests/experiments/conftest.py, ~20 s to build) share a
    # worker too: spread over both, the second worker to ask sat idle on the builder's file lock (7.5 s measured)
    smoke = [item for item in items if "tuned_smoke" in getattr(item, "fixturenames", ())]
    for item in smoke:
        item.add_marker(pytest.mark.xdist_group("tuned_smoke"))
    first = set(slurm) | set(smoke)
    items[:] = slurm + smoke + [item for item in items if item not in first]


UNGROUPED: list[str] = []  # slurm tests whose ids lack their xdist group on this worker (pytest_collection_finish)


def pytest_collection_finish(session):
    """On an xdist worker under --dist loadgroup: the slurm tests must carry their group in their ids (what xdist
    schedules by); with a pytest/xdist pair where they do not (pyproject.toml's pin) each fails, saying so, instead
    of racing another worker for the cluster. (A pytest run inside a test inherits PYTEST_XDIST_WORKER without
    being a worker: it has no loadgroup option.)"""
    if os.environ.get("PYTEST_XDIST_WORKER") and getattr(session.config.option, "loadgroup", False):
        UNGROUPED.extend(item.nodeid for item in session.items
                         if item.get_closest_marker("slurm") and not item.nodeid.endswith("@slurm"))


@pytest.fixture(autouse=True)
def _slurm_tests_share_a_worker(request):
    if UNGROUPED and request.node.get_closest_marker("slurm"):
        pytest.fail("--dist loadgroup did not put the slurm tests on one worker: this pytest and pytest-xdist do "
                    "not work together (pyproject.toml's pin, pytest-dev/pytest-xdist#1386)", pytrace=False)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Path to ../shared/data; skips the test when it is absent (a user's fresh clone)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared test data not found at {SHARED_DATA} (set ARCHLAB_SHARED_DATA or place it beside the clone)")
    return SHARED_DATA
