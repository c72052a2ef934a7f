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

import warnings
from dataclasses import dataclass, replace

from tvm.target import Target

from ..schedule import RecSchedule
from ..target import CpuInfo, cpu_info, make_target
from ..weights import pad_blocks
from . import derive

#: model attributes that are sizes of vectors the kernel computes on
SIZE_ATTRS = ("hidden_size", "embed_size")


def _padded_attrs(model) -> list:
    """The attributes of SIZE_ATTRS that `model` has as ints and does not fix (`fixed_sizes`: e.g.
    the width of features given per call)."""
    fixed = getattr(model, "fixed_sizes", ())
    return [a for a in SIZE_ATTRS if isinstance(getattr(model, a, None), int) and a not in fixed]


def _axis_layouts(model, attrs) -> dict | None:
    """weight -> per axis: None (keep) or (attr, blocks); None when an axis cannot be padded."""
    base = model.weight_shapes()
    moved = {attr: model.resized(**{attr: getattr(model, attr) + 1}).weight_shapes() for attr in attrs}
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


@dataclass(frozen=True)
class Padding:
    """How a model's sizes are rounded up for its kernel (`padding_of`), handed down the compile
    in `ProgramFacts.padding`: what the build records so that weights given in the user's sizes
    (`CompiledModel.load_weights`, an export's `load`, a cross-compiled object's user) are padded
    the same way.

    Example: TreeLSTM(150, V) at multiple 16 has sizes {"hidden_size": (150, 160), "embed_size":
    (150, 160)} and weight_padding["U"] == ((0, 5, 150, 160), (1, 2, 150, 160)): U's five gate
    blocks of rows and its two child blocks of columns each widened from 150 to 160."""

    #: the multiple every size is rounded up to (`pad_multiple`)
    multiple: int
    #: size attribute (SIZE_ATTRS) -> (the user's size, the kernel's)
    sizes: dict
    #: weight -> its padded axes (axis, blocks, size, padded size), as `weights.pad_blocks` reads
    #: them; only the weights with a padded axis (the meta.json "weight_padding" of an export)
    weight_padding: dict

    def apply(self, model):
        """`model` at the padded sizes (`Model.resized`) with its weights zero-padded."""
        padded = model.resized(**{attr: to for attr, (_, to) in self.sizes.items()})
        padded.weights = {name: pad_blocks(array, self.weight_padding.get(name, ()))
                          for name, array in model.weights.items()}
        return padded


def padding_of(model, multiple: int) -> Padding | None:
    """How `model`'s sizes in SIZE_ATTRS pad to `multiple` (`Padding`); None when no size needs
    padding or the model's weights cannot be padded (see the module docstring)."""
    attrs = _padded_attrs(model)
    sizes = {a: getattr(model, a) for a in attrs}
    targets = {a: -(-v // multiple) * multiple for a, v in sizes.items()}
    if multiple <= 1 or targets == sizes:
        return None
    layouts = _axis_layouts(model, attrs)
    if layouts is None or not any(axis for axes in layouts.values() for axis in axes):
        return None                   # ambiguous, or no weight grows with the sizes: fixed shapes
    axes = {name: tuple((axis, layout[1], sizes[layout[0]], targets[layout[0]])
                        for axis, layout in enumerate(layouts[name]) if layout is not None)
            for name in model.weights}
    return Padding(multiple, {a: (sizes[a], targets[a]) for a in attrs},
                   {name: pads for name, pads in axes.items() if pads})


def padded(model, multiple: int):
    """The same model with every size in SIZE_ATTRS rounded up to `multiple`, zero-padded weights
    (`padding_of(model, multiple).apply(model)`); None when `padding_of` is None.

    Example: ``padded(TreeLSTM(150, V), 16)`` is a TreeLSTM(160, V) whose U
    is (800, 320): rows 150..159 of each of the five gate blocks and columns
    150..159 of each child block are zero.
    """
    how = padding_of(model, multiple)
    return None if how is None else how.apply(model)


#: the most extra work (padded units / real units) spent to widen the register tile
MAX_WASTE = 0.125


def pad_multiple(model, info, middles=None) -> int:
    """The size multiple to pad to: the vector width, times the column vectors the narrowest
    internal GEMM's register tile can use when that costs at most MAX_WASTE more work.

    TreeFC (one accumulator row per node) on AVX2 at H=150: 152 = 19 vectors leaves a tile of
    one vector (19 is prime); 160 = 20 vectors takes four (32 columns) for 5% more work.  A
    TreeLSTM tile holds all five gates of one vector, so it pads to the vector width only.
    `middles`: the internal (not leaf) GEMMs' `Gemm.middle`, when known (else found here).
    """
    if middles is None:
        middles = internal_middles(RecSchedule(model.lower(specialize_leaves=True)))[1]
    node_tile = derive.default_node_tile(max(middles, default=1), info)
    vectors = derive.column_vectors(min(middles, default=1), node_tile, info.lanes, info.registers, 4)
    sizes = [getattr(model, a) for a in _padded_attrs(model)]
    for k in (4, 2, 1):
        multiple = info.lanes * k
        if k <= vectors and all(-(-v // multiple) * multiple - v <= MAX_WASTE * v for v in sizes):
            return multiple
    return info.lanes


def internal_middles(rs) -> tuple:
    """(the GEMMs of `rs`'s program, the middles of those not in a leaf block)."""
    found = tuple(derive.gemms(rs))
    leaves = set(rs.block_names("leaves"))
    return found, [g.middle for g in found if g.block not in leaves]


@dataclass(frozen=True)
class ProgramFacts:
    """What one compile finds out once about its model and target (`program_facts`), handed to
    the stages that would otherwise find it again: the derived recipe and its schedule
    (`recipes.resolve`, `derive.derive`), the shipped cost model's ranking (`pretrained.choose`)."""

    #: the TVM target, made once from the user's argument (`make_target`)
    target: Target
    #: the CPU's vector facts (`cpu_info`); None off a CPU
    info: CpuInfo | None
    #: the model as the kernel computes it (`padded_model`: sizes padded, zero weights)
    padded_model: object
    #: the GEMMs of padded_model's program with its leaves specialized (`derive.gemms`); () off a CPU
    gemms: tuple = ()
    #: how padded_model's sizes and weights are padded from the model's (`Padding`); None: not padded
    padding: Padding | None = None

    @property
    def kernel_model(self):
        """Deprecated: the old name of `padded_model`."""
        warnings.warn("ProgramFacts.kernel_model is deprecated; use ProgramFacts.padded_model",
                      DeprecationWarning, stacklevel=2)
        return self.padded_model


def program_facts(model, target) -> ProgramFacts:
    """The facts of compiling `model` for `target`: the target made, and for a CPU its vector
    facts, the padded model and its GEMMs, each found once (the GEMMs of the padded model are
    the model's own at the padded sizes: `padded_gemms`)."""
    tgt = make_target(target)
    if tgt.kind.name != "llvm":
        return ProgramFacts(tgt, None, model)
    info = cpu_info(tgt)
    found, middles = internal_middles(RecSchedule(model.lower(specialize_leaves=True)))
    how = padding_of(model, pad_multiple(model, info, middles))
    if how is None:
        return ProgramFacts(tgt, info, model, found)
    kernel = how.apply(model)
    found = padded_gemms(found, how.weight_padding)
    if found is None:                # a GEMM whose columns are not whole blocks of a padded size
        found = tuple(derive.gemms(RecSchedule(kernel.lower(specialize_leaves=True))))
    return ProgramFacts(tgt, info, kernel, found, how)


def padded_gemms(found, weight_padding: dict):
    """The GEMMs `found` of a model's program as they are in its padded form (`padded`): a GEMM
    whose columns are k blocks of a padded size has k blocks of the padded size; None when a
    GEMM's columns run over a padded weight axis in other than whole blocks."""
    out = []
    for g in found:
        pads = [p for p in weight_padding.get(g.weight, ()) if p[0] == g.axis]
        if pads:
            _, _, size, to = pads[0]
            if g.columns % size:
                return None
            g = replace(g, columns=g.columns // size * to)
        out.append(g)
    return tuple(out)


def padded_model(model, target):
    """The model as a CPU kernel computes it: sizes rounded up (`pad_multiple`) with zero
    weights, so every size gets full vectors and register tiles (the model itself otherwise)."""
    return program_facts(model, target).padded_model


def compiled_form(model, target):
    """Deprecated: the old name of `padded_model`, which returns the padded model."""
    warnings.warn("compiled_form is deprecated; use cortex_tvm.policy.padding.padded_model (same arguments)",
                  DeprecationWarning, stacklevel=2)
    return padded_model(model, target)
