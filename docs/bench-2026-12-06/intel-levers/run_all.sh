#!/bin/bash
# The runs behind levers.txt, one after another on an otherwise idle machine, from the repo root (its A/Bs were run
# as recip_ab.py and split_ab.py, since folded into levers_ab.py: the same arms; its third argument is now the CPU,
# the model the fourth, and its lines name the CPU).
D=docs/bench-2026-12-06/intel-levers
P=.venv/bin/python
for n in 512 128 40 16; do for r in 1 2; do $P $D/tile_order_probe.py $n 2>&1 | tail -4 | sed "s/^/tile run $r: /"; done; done
for r in 1 2; do $P $D/levers_ab.py recip 25 2>&1 | grep -v Warn | sed "s/^/recip run $r: /"; done
$P $D/levers_ab.py recip 10 2>&1 | grep -v Warn | sed "s/^/recip: /"
for r in 1 2; do $P $D/levers_ab.py split 25 2>&1 | grep -v Warn | sed "s/^/split run $r: /"; done
$P $D/levers_ab.py split 10 2>&1 | grep -v Warn | sed "s/^/split: /"
for t in 1 2; do TVM_NUM_THREADS=$t $P docs/bench-2026-12-06/intel-inplace/wide_levels.py 2>&1 | sed "s/^/threads=$t: /"; done
for mode in "" 1; do NOOP=$mode $P $D/host_floor.py 25 same 2>&1 | sed "s/^/host NOOP=${mode:-0}: /"; done
