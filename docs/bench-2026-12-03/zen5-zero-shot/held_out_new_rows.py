"""The "held out, the new rows only" table of docs/tuning.md (2026-12-03, evening).

    python docs/bench-2026-12-03/zen5-zero-shot/held_out_new_rows.py

The new rows are part (c) of tuning/cost_data.jsonl (rows that carry "rounds"); for each value
of a group part, a model is trained on every other row (old parts included) and tested on the
new groups with that value; the pick is the top-ranked of a group's measured points, taken over
the analytic default only when it ranks `margin` above it.
"""
import json

import numpy as np
import xgboost as xgb

from cortex_tvm.tune import train_cost_model as P
from cortex_tvm.tune.cost_model import spearman

rows = P.load_runs(["tuning/cost_data.jsonl"], drop_disturbed=False)
new = [r for r in rows if "rounds" in r]
parts = {"model+hidden": (0, 1), "cpu": (2,), "model": (0,), "batch": (3,)}
margins = (0.0, 0.1, 0.25, 0.5)
for by, idx in parts.items():
    def key(r):
        return "/".join(r["group"].split("/")[i] for i in idx)
    res = []
    for v in sorted({key(r) for r in new}):
        booster = P.train(P.without_disturbed([r for r in rows if key(r) != v]))
        test = [r for r in new if key(r) == v]
        for g in sorted({r["group"] for r in test}):
            grp = [r for r in test if r["group"] == g]
            pred = booster.predict(xgb.DMatrix(np.array([r["features"] for r in grp], dtype=np.float32)))
            secs = np.array([r["seconds"] for r in grp])
            d = [i for i, r in enumerate(grp) if r["default"]][0]
            pick = int(np.argmax(pred))
            res.append([spearman(pred, -secs), secs[d] / secs.min() - 1]
                       + [secs[pick if pred[pick] - pred[d] > m else d] / secs.min() - 1 for m in margins])
    m, worst = np.mean(res, axis=0), np.max(res, axis=0)
    print(f"held out {by} (new data, {len(res)} groups): spearman {m[0]:.2f}; default {100*m[1]:.1f}% "
          f"(worst {100*worst[1]:.0f}%); " + ", ".join(f"margin {mg}: {100*x:.1f}% (worst {100*w:.0f}%)"
                                                      for mg, x, w in zip(margins, m[2:], worst[2:])))
