#!/bin/bash
# Wall-clock time of the README's training commands (README.md sections 2-3), one after the other, in this checkout.
# Usage: source .venv/bin/activate && bash bench/readme_times.sh [OUT_DIR]   (default OUT_DIR: bench/readme_times)
# Writes OUT_DIR/times.tsv (name, exit status, seconds, load average before -> after, command) and OUT_DIR/<name>.out.
# Each command gets the thread count an idle 2-core machine gives it, explicitly (the load-aware default would see
# other work): a single run 2 threads, a joblib_2 job 1. The long sweeps are timed by one part (one joblib_2 round of
# pos_encodings, one packed encoding, the shallowest and deepest depth_vs_width runs); docs/benchmarks.md scales them.
# Takes about 40 minutes on a 2-core CPU. Not handled: a GPU (the commands run on the CPU as written).
set -u
cd "$(dirname "$0")/.."
OUT=${1:-bench/readme_times}
mkdir -p "$OUT"
export WANDB_MODE=offline HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
T=$(mktemp -d)  # run and sweep dirs: nothing of the checkout's outputs/ or multirun/ is touched
LOG=$OUT/times.tsv
t() { local name=$1; shift; local s; s=$(date +%s.%N); local l0; l0=$(cut -d' ' -f1 /proc/loadavg)
  "$@" > "$OUT/$name.out" 2>&1; local rc=$?
  local e; e=$(date +%s.%N)
  printf "%s\t%s\t%.1f\tload %s -> %s\t%s\n" "$name" "$rc" "$(echo "$e - $s" | bc)" "$l0" \
    "$(cut -d' ' -f1 /proc/loadavg)" "$*" >> "$LOG"; }
t train_default python -m experiments.train hydra.run.dir=$T/t1 train.num_threads=2
t train_steps20 python -m experiments.train train.steps=20 hydra.run.dir=$T/t2 train.num_threads=2
t tuned_pos python -m experiments.train -m experiment=tuned_pos hydra.sweep.dir=$T/tuned train.num_threads=2
t seq2seq_one python -m experiments.train task=seq2seq data.task=addition model/pos=alibi hydra.run.dir=$T/s2s \
  train.num_threads=2
t seq2seq_reverse python -m experiments.train -m experiment=seq2seq_reverse hydra/launcher=joblib_2 \
  hydra.sweep.dir=$T/rev train.num_threads=1
t small_2M python -m experiments.train model=small model/pos=rope model/norm=post train.tokens=2000000 \
  hydra.run.dir=$T/t3 train.num_threads=2
t pos_round_joblib2 python -m experiments.train -m experiment=pos_encodings hydra/launcher=joblib_2 \
  model/pos=learned,rope seed=0 hydra.sweep.dir=$T/pos train.num_threads=1
t pos_packed_one_pack python -m experiments.train -m experiment=pos_encodings hydra/launcher=packed model/pos=rope \
  hydra.sweep.dir=$T/packed train.num_threads=2
t depth_l1 python -m experiments.train -m experiment=depth_vs_width model.shape.n_layers=1 seed=0 \
  hydra.sweep.dir=$T/d1 train.num_threads=2
t depth_l16 python -m experiments.train -m experiment=depth_vs_width model.shape.n_layers=16 seed=0 \
  hydra.sweep.dir=$T/d16 train.num_threads=2
t torchrun_2 torchrun --standalone --nproc_per_node 2 -m experiments.train model=small train.tokens=2000000 \
  hydra.run.dir=$T/ddp
rm -rf "$T"
