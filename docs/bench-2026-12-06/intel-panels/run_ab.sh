#!/bin/bash
# panels_ab.txt: ../intel-levers/levers_ab.py panels (then panels_ab.py, the same code) on each case, one after
# another on an otherwise idle machine, from the repo root.
P=.venv/bin/python; A="docs/bench-2026-12-06/intel-levers/levers_ab.py panels"
for args in "25" "10" "1" "25 300" "25 150 haswell" "25 150 - treefc" "25 150 - treegru" "25 150 - childsum" \
            "10 100"; do
  $P $A $args 2>&1 | grep -v Warn
done
