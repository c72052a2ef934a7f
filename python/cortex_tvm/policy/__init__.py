"""The policy: what a compile chooses, apart from the mechanism that carries it out.

`derive` (the derived CPU schedule's rule and its knob space) and `padding` (the sizes a
kernel computes at) decide; the schedule package's primitives (`schedule/`), the TIR rewrites
and the build carry the decisions out.  The shipped cost model's chooser is `tune.pretrained`.
"""
