# archlab: every target creates/reuses .venv and installs what it needs.
#   make demo      train a tokenizer + run a small architecture sweep on the embedded corpus, build its report
#   make test      the default test suite (not `slow`)
#   make test-all  everything, `slow` included
#   make bench     the benchmarks under bench/ (results go in docs/benchmarks.md)
#   make gpu-check the GPU self-check: gpu tests, GPU benchmarks, a packed tuned sweep, one table (docs/gpu.md)
#   make wheelhouse the wheels archlab needs beyond an installed torch, for an offline install (docs/gpu.md)
#
# torch: `pip install torch==2.13.0` picks a local CPU wheel where one is on pip's find-links (as on the
# project's machines) and the normal PyPI build elsewhere. With a GPU, install the torch you want into .venv
# first (or set TORCH_SPEC, e.g. make test TORCH_SPEC='torch --index-url https://download.pytorch.org/whl/cu124'):
# an already-importable torch is kept as it is.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.archlab-installed
# PYTHONDONTWRITEBYTECODE emptied: the tests start many interpreters (CLI subprocesses, xdist workers, sweep jobs);
# where the environment sets it (as this workplace's does), each compiled the repo's modules again: 944 -> 868 CPU-s
# for the suite (docs/benchmarks.md, "Test suite"). __pycache__/ is in .gitignore.
PYTEST_ENV := WANDB_MODE=disabled HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONDONTWRITEBYTECODE=
PYTEST := $(PYTEST_ENV) $(PY) -m pytest
# pytest-xdist: one worker per core (TEST_WORKERS=0 runs in this process); the slurm tests share one worker
# (tests/conftest.py). Each test times out after 300 s (pyproject.toml), 1800 s in test-all's slow tier.
TEST_WORKERS ?= auto
XDIST := -n $(TEST_WORKERS) --dist loadgroup

.PHONY: venv demo test test-all coverage bench browser slurm clean gpu-check wheelhouse

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q $(TORCH_SPEC)
	$(PY) -m pip install -q -e '.[dev,joblib,slurm]'
	$(PY) -m pip install -q --no-deps mup==1.0.0  # μP's reference in tests; its requirements would pull a CUDA torch
	touch $(STAMP)

# Headless Chromium for the report-rendering test. Best effort: where it cannot be installed the test skips
# and says why. In CI (CI=true, root) it is installed from Debian's packages.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  { if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	      (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	      || echo "note: could not install chromium; the report-rendering test will skip"; \
	    else echo "note: chromium not found and not root; the report-rendering test will skip"; fi; }

# SLURM (slurm-wlm, munge) for the `slurm` tests, which start a one-node cluster with scripts/local_slurm.sh. Best
# effort, as for chromium: where it cannot be installed (not root, no apt-get) those tests skip and say why.
slurm:
	@command -v slurmctld >/dev/null 2>&1 && command -v munged >/dev/null 2>&1 || \
	  { if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	      bash scripts/local_slurm.sh install || echo "note: could not install slurm-wlm/munge; the slurm tests will skip"; \
	    else echo "note: slurm-wlm/munge not found and not root; the slurm tests will skip"; fi; }

demo: $(STAMP)
	$(PY) -m experiments.demo

test: $(STAMP) browser slurm
	$(PYTEST) -m "not slow" $(XDIST)

test-all: $(STAMP) browser slurm
	$(PYTEST) $(XDIST) --timeout=1800

# The default suite's line coverage of tokenizer/ arch/ experiments/ hydra_plugins/, subprocesses included
# (pyproject.toml [tool.coverage.run]); slower than `make test` (coverage traces every line).
COV := COVERAGE_FILE=$(CURDIR)/.coverage-data/.coverage $(PY) -m coverage
coverage: $(STAMP) browser slurm
	rm -rf .coverage-data && mkdir -p .coverage-data
	-$(PYTEST_ENV) COVERAGE_FILE=$(CURDIR)/.coverage-data/.coverage $(PY) -m coverage run -m pytest -m "not slow" $(XDIST) -q
	$(COV) combine -q
	$(COV) report --precision=2 | tail -1

bench: $(STAMP)
	$(PY) bench/bench_tokenizer.py
	$(PY) bench/bench_model.py
	$(PY) bench/bench_runner.py
	$(PY) bench/bench_encdec.py
	$(PY) bench/bench_norms.py
	$(PY) bench/bench_packed.py
	$(PY) bench/bench_threads.py
	@if [ -n "$$NANOGPT_DIR" ] && [ -n "$$SHAKESPEARE_TXT" ]; then \
	  $(PY) bench/bench_nanogpt.py --nanogpt "$$NANOGPT_DIR" --text "$$SHAKESPEARE_TXT"; \
	  else echo "bench_nanogpt.py skipped: set NANOGPT_DIR (a nanoGPT checkout) and SHAKESPEARE_TXT (tinyshakespeare's input.txt); docs/benchmarks.md"; fi

# The GPU self-check (scripts/gpu_check.py): GPU_CHECK_ARGS=--tests-only stops after the gpu tests. On a box where
# archlab was installed into another Python (from a wheelhouse, say), GPU_CHECK_PY=python3 uses that one instead of
# creating .venv.
GPU_CHECK_ARGS ?=
GPU_CHECK_PY ?=
gpu-check: $(if $(GPU_CHECK_PY),,$(STAMP))
	$(PYTEST_ENV) $(or $(GPU_CHECK_PY),$(PY)) scripts/gpu_check.py $(GPU_CHECK_ARGS)

# Air-gapped install (scripts/wheelhouse.py): WHEELHOUSE_SET=core leaves out wandb and datasets; WHEELHOUSE_PYTHON
# (e.g. 3.12) and WHEELHOUSE_PLATFORM (pip's tags, space-separated) name another target; WHEELHOUSE_HAVE
# (comma-separated) leaves out what the target already has. Needs pip and the package index, not .venv.
WHEELHOUSE ?= wheelhouse
WHEELHOUSE_SET ?= full
WHEELHOUSE_PYTHON ?=
WHEELHOUSE_PLATFORM ?=
WHEELHOUSE_HAVE ?=
wheelhouse:
	$(if $(wildcard $(PY)),$(PY),$(PYTHON)) scripts/wheelhouse.py --out $(WHEELHOUSE) --set $(WHEELHOUSE_SET) \
	  $(if $(WHEELHOUSE_PYTHON),--python-version $(WHEELHOUSE_PYTHON)) $(foreach p,$(WHEELHOUSE_PLATFORM),--platform $(p)) \
	  $(if $(WHEELHOUSE_HAVE),--have $(WHEELHOUSE_HAVE))

clean:
	rm -rf $(VENV) outputs multirun .pytest_cache
