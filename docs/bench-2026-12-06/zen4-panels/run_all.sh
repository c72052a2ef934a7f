#!/usr/bin/env bash
# The Intel evening's A/Bs (panels, aligned) and the training bench again on a Zen 4 VM (family 25 model 17, znver4,
# 2 vCPUs), with the code as it is now (FTZ/DAZ in the kernels).  Run from the repo root, nothing else running.
# (ab.txt's last two runs, ROUNDS=26, were run by hand afterwards and appended; this script's first lines would
# overwrite them.)
set -u
out=docs/bench-2026-12-06/zen4-panels
ab=docs/bench-2026-12-06/intel-levers/levers_ab.py
export PYTHONPATH=python
for args in "panels 25" "panels 10" "panels 1" "aligned 25 128" "flush 25" "flush 10"; do
  echo "== levers_ab.py $args"; .venv/bin/python $ab $args 2>&1 | grep -v Warning
done > $out/ab.txt
for optimizer in adagrad-sparse-ours adagrad-ours; do
  .venv/bin/cortex-tvm bench --train --optimizer $optimizer --models treelstm --hidden 150 --embed 300 \
    --batch 1 10 25 --systems cortex_tvm torch-levels dgl --rounds 2 --torch-python /work/venv-peers/bin/python \
    --out $out/train-$optimizer.json > $out/train-$optimizer.txt 2>&1
done
