# base: git worktree add /tmp/base a387243; run from the repository root with B=10 SPARSE=1
for i in 1 2 3 4; do
 for v in base new; do
  if [ $v = base ]; then pp=/tmp/base/python; else pp=python; fi
  echo -n "$v "; SPARSE=${SPARSE:-1} ROUNDS=5 PYTHONPATH=$pp .venv/bin/python docs/bench-2026-12-06/intel-train-optimizer/step_phases.py ${B:-10} 2>&1 | grep B=
 done
done
