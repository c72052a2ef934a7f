"""Sizes padded to the vector width, so that every hidden and embedding size stays on the fast path.

A TreeLSTM at H=150 on an AVX-512 CPU is compiled as the same model at
H=160: every weight axis that is made of H-sized blocks (U's five gate
blocks of rows, its two child blocks of columns) gets zero rows or columns
at the end of each block.  A real unit then reads a padded unit only through
a zero weight, so the real units compute exactly what the unpadded model
computes, and every register tile, vector loop and packed layout divides
evenly.  The executor slices the padding off the states it returns.

Which axes to pad is read off the model itself: `weight_shapes()` is
evaluated at H and at H+1 (and E, E+1), so an axis of extent a*H gets a
blocks of H, one of b*E gets b blocks of E, and an axis that does not move
(the vocabulary) stays.  A model whose axis mixes H and E, or adds a
constant to them, cannot be padded this way and compiles at its own sizes.
"""
from __future__ import annotations

import copy

from .schedule import RecSchedule, derive
from .target import cpu_info, make_target
from .weights import pad_blocks

#: model attributes that are sizes of vectors the kernel computes on
SIZE_ATTRS = ("hidden_size", "embed_size")


def _with_sizes(model, sizes: dict):
    clone = copy.copy(model)
    clone.__dict__ = {k: v for k, v in model.__dict__.items() if k not in ("_program", "_lowered")}
    clone._program = None
    clone.__dict__.update(sizes)
    return clone


def _axis_layouts(model, attrs) -> dict | None:
    """weight -> per axis: None (keep) or (attr, blocks); None when an axis cannot be padded."""
    base = model.weight_shapes()
    moved = {attr: _with_sizes(model, {attr: getattr(model, attr) + 1}).weight_shapes() for attr in attrs}
    out = {}
    for name, shape in base.items():
        axes = []
        for d, extent in enumerate(shape):
            growth = {attr: moved[attr][name][d] - extent for attr in attrs}
            growing = [a for a, g in growth.items() if g]
            if not growing:
                axes.append(None)
                continue
            attr = growing[0]
            blocks = growth[attr]
            if len(growing) > 1 or blocks * getattr(model, attr) != extent:
                return None           # an axis mixing sizes (or with a constant part) is ambiguous
            axes.append((attr, blocks))
        out[name] = axes
    return out


def padded(model, multiple: int):
    """The same model with every size in SIZE_ATTRS rounded up to `multiple`, zero-padded weights.

    Returns None when no size needs padding or the model's weights cannot be
    padded (see the module docstring).

    Example: ``padded(TreeLSTM(150, V), 16)`` is a TreeLSTM(160, V) whose U
    is (800, 320): rows 150..159 of each of the five gate blocks and columns
    150..159 of each child block are zero.
    """
    fixed = getattr(model, "fixed_sizes", ())          # e.g. the width of features given per call
    attrs = [a for a in SIZE_ATTRS if isinstance(getattr(model, a, None), int) and a not in fixed]
    sizes = {a: getattr(model, a) for a in attrs}
    targets = {a: -(-v // multiple) * multiple for a, v in sizes.items()}
    if multiple <= 1 or targets == sizes:
        return None
    layouts = _axis_layouts(model, attrs)
    if layouts is None or not any(axis for axes in layouts.values() for axis in axes):
        return None                   # ambiguous, or no weight grows with the sizes: fixed shapes
    # per weight, its padded axes (axis, blocks, size, padded size): kept, so that `load` pads
    # weights given in the user's sizes the same way
    weight_padding = {name: [(axis, layout[1], sizes[layout[0]], targets[layout[0]])
                             for axis, layout in enumerate(layouts[name]) if layout is not None]
                      for name in model.weights}
    weights = {name: pad_blocks(array, weight_padding[name]) for name, array in model.weights.items()}
    clone = _with_sizes(model, targets)
    clone.weights = weights
    clone.weight_padding = {name: pads for name, pads in weight_padding.items() if pads}
    return clone


#: the most extra work (padded units / real units) spent to widen the register tile
MAX_WASTE = 0.125


def pad_multiple(model, info) -> int:
    """The size multiple to pad to: the vector width, times the column vectors the narrowest
    internal GEMM's register tile can use when that costs at most MAX_WASTE more work.

    TreeFC (one accumulator row per node) on AVX2 at H=150: 152 = 19 vectors leaves a tile of
    one vector (19 is prime); 160 = 20 vectors takes four (32 columns) for 5% more work.  A
    TreeLSTM tile holds all five gates of one vector, so it pads to the vector width only.
    """
    rs = RecSchedule(model.lower(specialize_leaves=True))
    leaves = set(rs.block_names("leaves"))
    middles = [g.middle for g in derive.gemms(rs) if g.block not in leaves]
    node_tile = derive.default_node_tile(max(middles, default=1), info)
    vectors = derive.column_vectors(min(middles, default=1), node_tile, info.lanes, info.registers, 4)
    sizes = [getattr(model, a) for a in SIZE_ATTRS
             if isinstance(getattr(model, a, None), int) and a not in getattr(model, "fixed_sizes", ())]
    for k in (4, 2, 1):
        multiple = info.lanes * k
        if k <= vectors and all(-(-v // multiple) * multiple - v <= MAX_WASTE * v for v in sizes):
            return multiple
    return info.lanes


def compiled_form(model, target):
    """The model as a CPU kernel computes it: sizes rounded up (`pad_multiple`) with zero
    weights, so every size gets full vectors and register tiles (the model itself otherwise)."""
    tgt = make_target(target)
    if tgt.kind.name != "llvm":
        return model
    info = cpu_info(tgt)
    return padded(model, pad_multiple(model, info)) or model
