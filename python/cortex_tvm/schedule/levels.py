"""Primitives that shape a level's node loops for register tiles: padding every level to a
multiple of the tile, or whole tiles followed by a tail of the level's last nodes."""
from __future__ import annotations

from dataclasses import replace

from .. import level_tails as _tails
from .. import tir_rewrites
from .core import ScheduleError, primitive
from .layout import MIN_DENSE_ROWS
from .state import State


class LevelPrimitives:

    #: the node tile whose remainders have their own copies of each stage (level_tails), 1: none
    tail_tile = State(1)

    def _check_level_multiple(self, primitive: str, multiple: int):
        """pad_levels' and level_tails' preconditions: one of them, once, a multiple in 1..64."""
        if multiple < 1:
            raise ScheduleError(f"{primitive}: multiple must be a positive int, got {multiple!r}")
        if self.plan.node_tile != 1:
            raise ScheduleError(f"{primitive}: levels are already padded to {self.plan.node_tile}")
        if self.tail_tile != 1:
            raise ScheduleError(f"{primitive}: levels already end in tails (level_tails({self.tail_tile}))")
        if multiple > MIN_DENSE_ROWS:
            raise ScheduleError(f"{primitive}: multiple {multiple} > {MIN_DENSE_ROWS} is not supported")

    @primitive
    def pad_levels(self, multiple: int):
        """Pad every level to a multiple of `multiple` nodes, so node loops split by it need no bounds check.

        The linearizer adds pad rows (children at the null node) to each level;
        the node-loop extents become `(lo[l+1] - lo[l]) // multiple * multiple`,
        which TVM can prove divisible, so `split(node_loop, [None, multiple])`
        adds no `T.where`.

        Requires: not padded already.

        Examples
        --------
        Before::

            for j, r in T.grid(level_offsets[l + 1] - level_offsets[l], 1280): ...

        ``rs.pad_levels(3)``; after::

            for j, r in T.grid((level_offsets[l + 1] - level_offsets[l]) // 3 * 3, 1280): ...
        """
        self._check_level_multiple("pad_levels", multiple)
        self._rewrite(lambda f: tir_rewrites.pad_level_extents(f, multiple))
        self.plan = replace(self.plan, node_tile=multiple)
        return self

    @primitive
    def level_tails(self, multiple: int):
        """Run each level's whole tiles of `multiple` nodes, then its last nodes in one tile of their own.

        Levels are not padded.  The stages of the leaves and of a level keep
        the whole tiles' `(size // multiple) * multiple` nodes (block
        `<scope>_whole`), and each remainder r in 1..multiple-1 gets a copy of
        them (block `<scope>_tail<r>`, guarded by `size % multiple == r`;
        blocks `<block>_tail<r>`, scratchpads of their own) over the constant r
        nodes after them: a tile of r nodes for the last r, so a level of one
        node costs one node's FLOPs, not a padded tile's.  Schedule a copy as
        the original, with node_tile=r for its GEMM (derive does).  When the
        schedule is finalized the blocks open: stage k of each copy runs right
        after stage k of the whole tiles, under its guard, and a parallel one
        joins the whole tiles' parallel loop when the extents match (one fork
        and join for the tiles and the tail; else its own, taken only when the
        level leaves its remainder).

        Requires: levels neither padded (pad_levels) nor split already;
        multiple <= MIN_DENSE_ROWS.

        Examples
        --------
        Before::

            for j, r in T.grid(level_offsets[l + 1] - level_offsets[l], 1280): ...   # "gates_sum"

        ``rs.level_tails(3)``; after (`n` = lo[l + 1] - lo[l])::

            with T.sblock("level_whole"):
                for j, r in T.grid(n // 3 * 3, 1280): ...                 # "gates_sum"
            with T.sblock("level_tail1"):
                T.where(n % 3 == 1)
                for j, r in T.grid(1, 1280): ...      # "gates_sum_tail1", node lo[l] + (n // 3 * 3 + j)
            with T.sblock("level_tail2"):
                T.where(n % 3 == 2)
                for j, r in T.grid(2, 1280): ...      # "gates_sum_tail2"
        """
        self._check_level_multiple("level_tails", multiple)
        if multiple > 1:
            self._rewrite(lambda f: _tails.split(tir_rewrites.pad_level_extents(f, multiple), multiple))
        self.tail_tile = multiple
        return self
