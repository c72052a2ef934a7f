"""A model from a hand-written RA program and its weights (`ct.compile(program, weights=...)`)."""
from __future__ import annotations

from .. import lower as _lower
from .. import ra
from .base import Model


class ProgramModel(Model):
    """The RA program `program` with the weights it reads, as a model.

    The weights and the word bound are the ones the program reads (found by
    lowering it once); `hidden_size` is the first state's length.  Everything
    downstream of the program applies: `compile`, `lower`, `RecSchedule`,
    Relax, export.  There is no numpy executor for an arbitrary program, so
    `reference` (and the tuner, which checks every trial against it) is not
    available; compare with `compile(schedule="none")`, the program as
    lowered.  Example (the README's TreeFC program)::

        model = ProgramModel(program, {"emb": emb, "W": W, "b": b})
        roots = model.compile()(trees)
    """

    def __init__(self, program: ra.RecProgram, weights: dict):
        if not isinstance(program, ra.RecProgram):
            raise TypeError(f"expected an ra.RecProgram (from ra.rec_compute), got {type(program).__name__}")
        lowered = _lower.lower(program, specialize_leaves=True)
        self._fixed = program
        self._shapes = {w.name: tuple(w.shape) for w in lowered.weights}
        bounds = [inp.bound for inp in lowered.node_inputs]
        self.vocab_size = min(bounds) if bounds else None
        self.hidden_size = int(program.states[0].shape[0])
        super().__init__(seed=0)
        self.load_weights(weights)

    def __repr__(self):
        return f"ProgramModel({', '.join(s.name for s in self._fixed.states)}; weights {sorted(self._shapes)})"

    def weight_shapes(self) -> dict:
        return dict(self._shapes)

    def build_program(self):
        return self._fixed

    def numpy_forward(self, lin):
        raise NotImplementedError("a hand-written RA program has no numpy executor; compare with "
                                  "compile(schedule='none') (the program as lowered) or write the model "
                                  "as a ct.models.Model subclass with numpy_forward")
