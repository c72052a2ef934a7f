"""A compiled recursive model inside a Relax IRModule.

`as_relax(model)` returns `(mod, make_inputs)`: `mod["main"]` takes the
linearized structure (per-node inputs, children, level offsets, roots and a
shape holding the largest level size) and calls the model's scheduled
recursive PrimFunc through `R.call_tir_inplace` with a dynamic node count;
`make_inputs(trees)` linearizes a batch into that argument list:

    mod, make_inputs = model.as_relax("llvm")
    vm = relax.VirtualMachine(tvm.compile(mod, target, tir_pipeline=ct.TIR_PIPELINE), tvm.cpu())
    roots = vm["main"](*make_inputs(trees)).numpy()      # (B, *first state shape)

`tir_pipeline=ct.TIR_PIPELINE` keeps the kernel's register tiles on the stack, as
`compile()` builds them (`tir_pipeline.py`); TVM's default pipeline computes the
same roots with tiles of 1 KB or more in heap memory, slower (TreeLSTM H=256, batch
10, Zen 5: 1.6x).

How the kernel is called: its recursive states (h, c, ...) are scratch
tensors of shape (num_slots, *state shape) that the kernel writes, and slot
0 (the null node) must read zero.  `main` allocates them with `R.zeros` and
passes them to `call_tir_inplace` as inputs that the call also returns
(inplace_indices), so no pure `call_tir` input is mutated; `out` is the one
freshly allocated output.  The kernel's scalar parameter `max_level_size`
(it sizes the dense scratchpads) cannot be a Relax argument of this TVM (no
PrimValue), so the PrimFunc is rewritten to read it as the extent of an
extra int32 buffer parameter; `main` gets it as a `R.Shape([m])` input and
allocates a placeholder of that size.  Weights are Relax constants: the
kernel's arguments, which the schedule's parameter transforms (packing, leaf
tables) compute from the model's weights once, when the call is made.

Sizes are padded to the vector width as `compile()` pads them (`policy/padding.py`),
so an odd hidden size gets the same register-tiled kernel; `emit` slices the
roots back to the model's state shape with `R.strided_slice`.

`RecursiveCall` is the building block: `emit(bb)` emits the call inside a
BlockBuilder function whose parameters include `call.params`, so a model
can be surrounded by other Relax code (see examples/sst_classifier.py).
Only single-kernel plans are supported (`per_level_kernels` is not).
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, tirx

from . import build as _build
from . import recipes as _recipes
from .compile_cache import build_module
from .kernel_args import kernel_weights, model_weight_arrays
from .policy.padding import padded_model

__all__ = ["RecursiveCall", "as_relax"]


def _with_shape_param(func: tirx.PrimFunc, scalar_name: str) -> tirx.PrimFunc:
    """`func` with its int32 scalar parameter `scalar_name` replaced by an int32 buffer of that extent."""
    params = []
    for p in func.params:
        if p.name == scalar_name and not hasattr(p.ty, "shape"):
            p = tirx.decl_buffer((p,), "int32", name=f"{scalar_name}_extent")
        params.append(p)
    return tirx.PrimFunc(params, func.body, func.ret_type, func.attrs)


class RecursiveCall:
    """The scheduled recursive kernel of `model` as a Relax call with dynamic sizes."""

    def __init__(self, model, target="llvm", schedule=None, precision="fp32"):
        if not all(callable(getattr(model, name, None)) for name in ("lower", "weight_shapes")):   # (a Model's)
            hint = (": pass the model itself, not what its compile() returned; the Relax module is compiled "
                    "by its own tvm.compile" if type(model).__name__ == "CompiledModel" else "")
            raise TypeError(f"as_relax: expected a model (a zoo model, ct.ProgramModel or a @ct.recursive "
                            f"cell's), got {type(model).__name__}{hint}")
        tgt = _build.make_target(target)
        _recipes.check_precision(precision, tgt)
        # the sizes padded to the vector width as compile() pads them; the roots are sliced back
        padded = padded_model(model, tgt)
        schedule = _recipes.with_precision(_recipes.resolve(padded, tgt, schedule), precision)
        # bf16 stays storage-only here: the caller compiles the module, for any target, and LLVM
        # aborts the process on vdpbf16ps (dot_bf16) for a CPU without AVX512_BF16
        rs, recipe = _build.schedule_model(padded, tgt, schedule, bf16_dot=False)
        if rs.plan.per_level:
            raise ValueError(f"as_relax: recipe {recipe.name!r} uses per-level kernels; Relax embedding "
                             "needs a single-kernel schedule (pass schedule=... without per_level_kernels)")
        self.model, self.target, self.plan, self.recipe_name = model, tgt, rs.plan, recipe.name
        self.signature = rs.signature
        self.pass_config = rs.plan.pass_config()
        self.func = _with_shape_param(rs.func, "max_level_size")
        self.weights = self._transformed_weights(rs, padded)
        self.states = self.signature.states
        #: the first state's shape as the user's model has it (the kernel's may be padded)
        self.visible_shape = tuple(int(d) for d in model.program.states[0].shape)

        sizes = {name: tirx.Var(name, "int64") for name in ("num_slots", "num_levels_plus_1", "batch")}
        self._N, self._B, self._M = sizes["num_slots"], sizes["batch"], tirx.Var("max_level_size", "int64")
        # the structure parameters, as the signature orders them; the scalar max_level_size
        # becomes a shape (Relax passes the level extent as a symbolic size)
        self.params = []
        for p in self.signature.params():
            if p.role == "weight":
                break
            if p.role == "max_level_size":
                self.params.append(relax.Var("level_extent", relax.ShapeType([self._M])))
            else:
                shape = [sizes.get(d, d) for d in p.shape]
                self.params.append(relax.Var(p.name, relax.TensorType(shape, p.dtype)))

    def _transformed_weights(self, rs, padded) -> list:
        """The kernel's weight arguments (Relax constants): the model's weights through the
        module's parameter transforms, run once on the target's device, as `compile()` runs them."""
        model_weights = model_weight_arrays(padded, self.signature)
        if not self.signature.transform:
            return [model_weights[n] for n, _, _ in self.signature.weights]
        device = tvm.cuda(0) if self.target.kind.name == "cuda" else tvm.cpu(0)
        executable = build_module(rs.finalize().module(), self.target, self.pass_config)
        arrays = kernel_weights(executable, self.signature, model_weights,
                                lambda a: tvm.runtime.tensor(np.ascontiguousarray(a), device))
        return [a.numpy() for a in arrays]

    @property
    def out_type(self):
        """The type of what `emit` returns: the roots' first state, (B, *the model's state shape)."""
        return relax.TensorType([self._B, *self.visible_shape], self.states[0][2])

    def emit(self, bb: relax.BlockBuilder, name: str = "cortex_main") -> relax.Expr:
        """Emit the kernel call in the current function of `bb`; returns the root states (B, *shape)."""
        gv = bb.add_func(self.func, name)
        *structure, extent_shape = self.params
        extent = bb.emit(relax.op.zeros(relax.ShapeExpr([self._M]), "int32"))
        states = [bb.emit(relax.op.zeros(relax.ShapeExpr([self._N, *shape]), dtype)) for _, shape, dtype in self.states]
        args = structure + [extent] + [relax.const(w) for w in self.weights] + states
        first_state = len(args) - len(states)
        _, kernel_shape, dtype = self.states[0]
        out_types = [relax.TensorType([self._N, *shape], dtype) for _, shape, dtype in self.states] + \
            [relax.TensorType([self._B, *kernel_shape], dtype)]
        result = bb.emit(relax.op.call_tir_inplace(
            gv, relax.Tuple(args), inplace_indices=[first_state + i for i in range(len(states))] + [-1],
            out_ty=out_types))
        roots = bb.emit(relax.TupleGetItem(result, len(states)))
        if tuple(kernel_shape) == self.visible_shape:
            return roots
        axes = list(range(1, 1 + len(kernel_shape)))
        return bb.emit(relax.op.strided_slice(roots, axes, [0] * len(axes), list(self.visible_shape)))

    def linearize(self, trees, features=None):
        return self.signature.layout(trees, self.plan.node_tile, self.plan.dynamic_batching, self.model.vocab_bound,
                                     features=features)

    def make_inputs(self, trees, device=None, features=None) -> list:
        """The arguments of the structure parameters (`self.params`) for a batch of trees (and its
        per-node feature rows, for a model that reads them: see `CompiledModel.__call__`)."""
        device = tvm.cpu() if device is None else device
        lin = self.linearize(trees, features)

        def tensor(a):            # index arrays as int32; feature rows keep their float32
            return tvm.runtime.tensor(np.ascontiguousarray(a, dtype=np.int32 if a.dtype.kind in "iu" else None),
                                      device)
        *args, max_level_size = self.signature.structure_args(lin, tensor)
        return args + [tvm.runtime.ShapeTuple([max_level_size])]


def as_relax(model, target="llvm", schedule=None, precision="fp32"):
    """(mod, make_inputs): a Relax IRModule whose `main` returns the root states of a batch.
    precision: as `Model.compile` ("bf16" stores the packed weights as bfloat16; the products
    stay float32 here even on a CPU with AVX512_BF16, see `RecSchedule.dot_bf16`)."""
    call = RecursiveCall(model, target, schedule, precision)
    bb = relax.BlockBuilder()
    with bb.function("main", call.params):
        with bb.dataflow():
            roots = call.emit(bb)
            out = bb.emit_output(roots)
        bb.emit_func_output(out)
    mod = bb.get()
    return mod, call.make_inputs
