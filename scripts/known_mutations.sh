#!/bin/bash
# The mutations the default suite is known to catch (issue 31: a faster suite must keep its fault-finding power).
# Each is applied alone to a clone of this checkout (its .venv linked, the tree itself untouched) and the tests that
# should catch it run with -m "not slow"; it is caught when one of them fails. Exit 1 if any mutation survives.
#   bash scripts/known_mutations.sh          (~1-2 min on 2 cores; docs/benchmarks.md, "Test suite")
set -u
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
git clone -q "$repo" "$work/m" && ln -s "$repo/.venv" "$work/m/.venv" && cd "$work/m" || exit 2
survived=0

mutate() {  # name file old new tests...: replace the one occurrence of `old` in `file` by `new`, run the tests
    local name=$1 file=$2 old=$3 new=$4; shift 4
    git checkout -q -- .
    .venv/bin/python - "$file" "$old" "$new" <<'PY' || { echo "== $name: the code to mutate is gone"; survived=1; return; }
import sys
path, old, new = sys.argv[1:]
text = open(path).read()
if text.count(old) != 1:
    sys.exit(1)
open(path, "w").write(text.replace(old, new))
PY
    local out
    out=$(WANDB_MODE=disabled PYTHONPATH="$work/m" .venv/bin/python -m pytest "$@" -m "not slow" -x -q \
          -p no:cacheprovider -n 2 2>&1 | tail -1)
    if [[ "$out" == *failed* ]]; then echo "== $name: caught ($out)"; else echo "== $name: SURVIVED ($out)"; survived=1; fi
}

mutate mup_init_exponent arch/mup.py "fan_in_mult ** -0.5" "fan_in_mult ** -1.0" \
    tests/arch/test_mup.py tests/arch/test_mup_coord.py
mutate mup_lr_scaling arch/mup.py "1.0 / s.fan_in_mult if s.matrix_like" "1.0 if s.matrix_like" \
    tests/arch/test_mup.py tests/arch/test_mup_coord.py
mutate tuning_filter experiments/compare/tuning.py \
    "reported = [r for r in runs if r.path is None or r.path.resolve() in finals or _tuned_of(r, tuned) is None]" \
    "reported = list(runs)" tests/experiments/test_tune_report.py tests/experiments/test_tune_bad_input.py
mutate merge_tiebreak tokenizer/merge.py 'return "".join(_INVERT[x] for x in b) + _END' \
    'return "".join(chr(x) for x in b) + _END' tests/tokenizer
mutate compose_cache_dirname experiments/config/compose_cache.py "cfg.hydra.job.override_dirname = get_overrides_dirname" \
    "cfg.hydra.job.override_dirname_ = get_overrides_dirname" tests/experiments/test_compose_cache.py
mutate compose_cache_job_name experiments/config/compose_cache.py \
    'return _with_values(base, parsed, values, JobRuntime().get("name") if unnamed else None)' \
    'return _with_values(base, parsed, values, None)' tests/experiments/test_compose_cache.py
mutate stop_raise_in_finalizer tokenizer/stop.py "    if not _in_finalizer(frame):" "    if True:" \
    tests/tokenizer/test_stop.py
mutate stop_check_before_commit tokenizer/outputs.py "        check_stop()  # a Ctrl-C whose raise was dropped" \
    "        pass  # a Ctrl-C whose raise was dropped" tests/tokenizer/test_stop.py
mutate compose_cache_get_mode experiments/config/compose_cache.py "with_log_configuration=False).hydra.mode" \
    "with_log_configuration=False).hydra.mode and None" tests/experiments/test_compose_cache.py
mutate slurm_result_seen_late experiments/sweep/slurm.py "            self._sleep(poll_s)" \
    "            self._sleep(delay)" tests/experiments/test_slurm_pack.py
exit $survived
