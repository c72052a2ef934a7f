#!/bin/bash
# aligned_ab.txt: ../intel-levers/levers_ab.py aligned on each case ("new": the backward's copy in panels also for
# blocks of whole lines, as the package now does; "old": the package before, which read those weights as they lie),
# one after another on an otherwise idle machine, from the repo root.  aligned_ab.txt was made before the package
# changed, with "new" the patched arm and "old" the package; the script now patches the "old" arm instead (the same
# two builds).
P=.venv/bin/python; A="docs/bench-2026-12-06/intel-levers/levers_ab.py aligned"
for args in "25 128" "10 128" "25 256" "25 64" "25 128 - treefc" "25 128 - treegru"; do
  $P $A $args 2>&1 | grep -v Warn
done
