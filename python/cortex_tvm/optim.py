"""`Adagrad`: torch.optim.Adagrad's step as two compiled loops, one parallel pass over each weight
(torch is optional: this module imports it).

A trained module's step ends in the optimizer (`as_torch`).  torch.optim.Adagrad runs each
parameter's update as four or five tensor operations, each a pass over the weight with a
temporary, and a sparse gradient (`as_torch(sparse=True)`) through `coalesce`, `sparse_mask` and
three sparse tensors; for DGL's TreeLSTM recipe at h = 150 that took 2.3 ms of an 11 ms step at
batch 25 (docs/bench-2026-12-06/intel-optim/step_parts.txt).  Here each weight is one parallel loop that
reads the parameter, its gradient and its sum of squares once and writes both back
(`cortex_adagrad_dense`), and a sparse gradient one pass over its rows (`cortex_adagrad_rows`),
built by TVM for this CPU (or `target=`'s) when the first optimizer is made.  Their vectors are 16 float32 lanes,
AVX-512's; LLVM splits them in two for AVX2 (a test checks both builds against numpy).

Each loop also sums the new values it writes, by lane and block (its probe: a few thousand floats
for a weight of 180,000), a sum that is finite only where they all are.  Where it is, the parameter
is marked finite at the version the step left it (`weights.mark_finite`; an embedding's table where,
besides, it was known finite before: marked by the last step, or the first time checked whole), and
a module of `as_torch` hands it to its compiled model unchecked: the finite check of every weight
after every step (about 0.2 ms of a 5 ms TreeLSTM step at batch 25, h = 150, Sapphire Rapids) is the
write's own.  A parameter the loops made NaN or infinite is not marked: the next forward refuses it
by name (and one whose sum overflowed is checked as before).  A table that lost its mark (an edit, a
NaN) is not scanned whole again: its rows are checked per batch, as without this optimizer.

The class is torch.optim.Adagrad with `step` replaced: the same arguments, parameter groups,
state (`sum`, `step`) and `state_dict`, so a checkpoint moves between the two, and the same
update, element by element::

    g = grad + weight_decay * param            (dense gradients only, as torch)
    sum += g * g
    param += -lr / (1 + (step - 1) * lr_decay) * (g / (sqrt(sum) + eps))

Before: ``opt = torch.optim.Adagrad(module.parameters(), lr=0.05)``; after:
``opt = ct.optim.Adagrad(module.parameters(), lr=0.05)``; ``opt.step()`` alike.
Parameters: float32 and contiguous on the CPU; a sparse gradient: the COO tensor of rows that
`as_torch(sparse=True)` and `nn.Embedding(sparse=True)` make.  Anything else is a ValueError
that names the parameter, never a read outside it.
"""
from __future__ import annotations

import math
import threading

import numpy as np
import torch
from tvm.script import tirx as T

from .weights import all_finite, mark_finite, marked_finite


#: 16-lane vectors per row of the dense loop's probe (`_dense`)
PROBE_VECTORS = 64


@T.prim_func
def _dense(p_param: T.handle, p_grad: T.handle, p_sum: T.handle, p_probe: T.handle, clr: T.float32,
           weight_decay: T.float32, eps: T.float32):
    # (no local names for g and the sum: a let inside a vectorized loop came out as lane 0's value
    # broadcast; the sum is read back after its store instead, which LLVM forwards).  probe: per
    # PROBE_VECTORS vectors of the parameter, per lane, the sum of its new values (its last row's lane 0
    # adds the rest past the whole vectors too); rows: `probe_rows(n)`.  Finite only where every value
    # is (or a sum overflowed: the values are then checked as without a probe).  (A count by isfinite
    # took about 40% longer on a weight of 180,000; a sum, no longer than the loop without a probe)
    T.func_attr({"global_symbol": "cortex_adagrad_dense", "tirx.noalias": True})
    n = T.int64()
    param = T.match_buffer(p_param, (n,), "float32", align=4)
    grad = T.match_buffer(p_grad, (n,), "float32", align=4)
    sums = T.match_buffer(p_sum, (n,), "float32", align=4)
    # (its rows tied to n: a probe of another size is the call's error, not blocks left unstepped)
    probe = T.match_buffer(p_probe, (n // (16 * PROBE_VECTORS) + 1, 16), "float32", align=4)
    for chunk in T.parallel(n // (16 * PROBE_VECTORS) + 1):
        for lane in T.vectorized(16):
            probe[chunk, lane] = T.float32(0)
        for vector in range(PROBE_VECTORS):
            block = chunk * PROBE_VECTORS + vector
            if block < n // 16:
                for lane in T.vectorized(16):
                    sums[block * 16 + lane] = sums[block * 16 + lane] + (
                        grad[block * 16 + lane] + weight_decay * param[block * 16 + lane]) * (
                        grad[block * 16 + lane] + weight_decay * param[block * 16 + lane])
                    param[block * 16 + lane] = param[block * 16 + lane] - clr * (
                        (grad[block * 16 + lane] + weight_decay * param[block * 16 + lane])
                        / (T.sqrt(sums[block * 16 + lane]) + eps))
                    probe[chunk, lane] = probe[chunk, lane] + param[block * 16 + lane]
    for i in range(n // 16 * 16, n):
        sums[i] = sums[i] + (grad[i] + weight_decay * param[i]) * (grad[i] + weight_decay * param[i])
        param[i] = param[i] - clr * ((grad[i] + weight_decay * param[i]) / (T.sqrt(sums[i]) + eps))
        probe[n // (16 * PROBE_VECTORS), 0] = probe[n // (16 * PROBE_VECTORS), 0] + param[i]


@T.prim_func
def _rows(p_param: T.handle, p_sum: T.handle, p_rows: T.handle, p_values: T.handle, p_probe: T.handle,
          clr: T.float32, eps: T.float32):
    # probe: per row updated, per lane, the sum of its new values (`_dense`'s)
    T.func_attr({"global_symbol": "cortex_adagrad_rows", "tirx.noalias": True})
    V = T.int64()
    D = T.int64()
    m = T.int64()
    param = T.match_buffer(p_param, (V, D), "float32", align=4)
    sums = T.match_buffer(p_sum, (V, D), "float32", align=4)
    rows = T.match_buffer(p_rows, (m,), "int64", align=4)
    values = T.match_buffer(p_values, (m, D), "float32", align=4)
    probe = T.match_buffer(p_probe, (m, 16), "float32", align=4)
    for i in T.parallel(m):         # the rows are distinct (coalesced) and inside [0, V): checked
        for lane in T.vectorized(16):
            probe[i, lane] = T.float32(0)
        for block in range(D // 16):
            for lane in T.vectorized(16):
                sums[rows[i], block * 16 + lane] = sums[rows[i], block * 16 + lane] + (
                    values[i, block * 16 + lane] * values[i, block * 16 + lane])
                param[rows[i], block * 16 + lane] = param[rows[i], block * 16 + lane] - clr * (
                    values[i, block * 16 + lane] / (T.sqrt(sums[rows[i], block * 16 + lane]) + eps))
                probe[i, lane] = probe[i, lane] + param[rows[i], block * 16 + lane]
        for j in range(D // 16 * 16, D):
            sums[rows[i], j] = sums[rows[i], j] + values[i, j] * values[i, j]
            param[rows[i], j] = param[rows[i], j] - clr * (values[i, j] / (T.sqrt(sums[rows[i], j]) + eps))
            probe[i, 0] = probe[i, 0] + param[rows[i], j]


def probe_rows(size: int) -> int:
    """The rows of `cortex_adagrad_dense`'s probe for a parameter of `size` elements: one per
    PROBE_VECTORS vectors, and at least one (its last also sums the rest past the whole vectors)."""
    return size // (16 * PROBE_VECTORS) + 1


_BUILT = {}
_BUILD_LOCK = threading.Lock()


def build_loops(target="llvm") -> tuple:
    """(dense, rows): the two loops (`cortex_adagrad_dense`, `cortex_adagrad_rows`) built for
    `target` (`cortex_tvm.make_target`'s argument; "llvm": this CPU)."""
    import tvm
    from . import tir_pipeline
    from .target import make_target
    executable = tvm.compile(tvm.IRModule({"cortex_adagrad_dense": _dense, "cortex_adagrad_rows": _rows}),
                             target=make_target(target), tir_pipeline=tir_pipeline.NAME)
    return executable["cortex_adagrad_dense"], executable["cortex_adagrad_rows"]


def _kernels(target=None):
    """`build_loops(target)` (a target's string; None: this CPU), once per process and target."""
    with _BUILD_LOCK:
        if target not in _BUILT:
            import tvm
            _BUILT[target] = build_loops("llvm" if target is None else tvm.target.Target(target))
        return _BUILT[target]


class Adagrad(torch.optim.Adagrad):
    """torch.optim.Adagrad whose `step` runs compiled loops (module docstring): the same
    arguments (foreach, maximize, fused and differentiable by keyword only, and refused when true),
    and target=: the CPU its loops are built for (`cortex_tvm.make_target`'s argument; None: this
    one), e.g. the compiled model's ``compiled.target`` where that is another CPU's code (AVX2's).

    Example (DGL's TreeLSTM recipe; with torch.optim.Adagrad in its place, the same numbers)::

        module = model.compile(training=True).as_torch(sparse=True)
        rest = [p for name, p in module.named_parameters() if name != "emb"]
        optimizer = ct.optim.Adagrad([{"params": rest, "weight_decay": 1e-4},
                                      {"params": [module.emb], "lr": 0.005}], lr=0.05)
        loss.backward(); optimizer.step()
    """

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0, eps=1e-10,
                 *, target=None, **options):
        for name in ("maximize", "foreach", "fused", "differentiable"):
            if options.get(name):
                raise ValueError(f"cortex_tvm.optim.Adagrad: {name}=True is not supported (torch.optim.Adagrad has it)")
        unknown = set(options) - {"maximize", "foreach", "fused", "differentiable"}
        if unknown:
            raise TypeError(f"cortex_tvm.optim.Adagrad: unexpected argument(s) {sorted(unknown)}")
        super().__init__(params, lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                         initial_accumulator_value=initial_accumulator_value, eps=eps)
        self._target = None if target is None else _cpu_target(target)
        #: parameter -> (what its memory and its sum's were when checked, their views, the dense loop's
        #: probe): `_memory`
        self._checked = {}
        #: the parameters updated by rows whose values were once checked whole (`_finite_before`)
        self._scanned = set()
        _kernels(self._target)          # built now, not in the first step

    @torch.no_grad()
    def step(self, closure=None):
        """One update of every parameter that has a gradient; returns closure()'s loss if given.
        Every parameter and gradient is checked before the first is updated."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        dense, rows = _kernels(self._target)
        updates, steps = [], []
        for number, group in enumerate(self.param_groups):
            for index, param in enumerate(group["params"]):
                grad = param.grad
                if grad is None:
                    continue
                state = self.state[param]
                held = self._memory(param, state["sum"], number, index)
                if grad.is_sparse:
                    if group["weight_decay"] != 0:
                        raise ValueError(_where(number, index) + ": a sparse gradient takes no weight_decay (as "
                                         "torch.optim.Adagrad); put the parameter in a group with weight_decay=0")
                    found, values = _sparse_rows(grad, param, number, index)
                    probe = np.empty((max(len(found), 1), 16), np.float32)
                    # (the rows' probe vouches for the table where the rest was finite before)
                    updates.append((group, param, rows if len(found) else None,     # (TVM takes no empty array)
                                    (held[1], held[2], found, values, probe), (group["eps"],),
                                    self._finite_before(param)))
                else:
                    _check_dense(grad, number, index, "'s gradient", param.shape)
                    updates.append((group, param, dense, (held[3], grad.view(-1), held[4], held[5]),
                                    (group["weight_decay"], group["eps"]), True))
                steps.append(state["step"])
        if steps:                           # (one op for all, as torch's foreach path)
            torch._foreach_add_(steps, 1)
        changed, probed = [], []
        try:
            for (group, param, kernel, arrays, options, vouched), step in zip(updates, steps):
                lr_decay = group["lr_decay"]
                clr = group["lr"] / (1 + (step.item() - 1) * lr_decay) if lr_decay else group["lr"]
                if kernel is not None and arrays[0].numel():       # (the step counts, as torch's)
                    kernel(*arrays, clr, *options)
                    changed += (param, self.state[param]["sum"])
                    if vouched:                 # (the probe is the kernel's last array)
                        probed.append((param, arrays[-1]))
        finally:
            # the kernels wrote the memory behind torch's back: count the change as an in-place op
            # does, or a module that hands changed parameters to its kernel (`as_torch`) would keep
            # the last ones, and autograd would miss a step between a forward and its backward
            if changed:
                torch.autograd.graph.increment_version(changed)
        for param, probe in probed:
            # (one sum of the probe's sums: a NaN or an infinity anywhere makes it one)
            if math.isfinite(probe.sum()):
                mark_finite(param)
        return loss

    def _finite_before(self, param) -> bool:
        """Whether `param`'s values are known finite before this step's update of some of its rows:
        marked so (`weights.mark_finite`) since the last step, or the first time this optimizer updates
        it, found so by a pass over all of it (an embedding's megabytes, once)."""
        if marked_finite(param):
            return True
        if param in self._scanned:
            return False
        self._scanned.add(param)
        if not all_finite(param.detach().numpy()):
            return False
        mark_finite(param)      # (so far: a step that then updates no row of it keeps the mark)
        return True

    def _memory(self, param, sums, number: int, index: int) -> tuple:
        """(key, param, its sum, param, its sum, probe): the two detached, as (rows, elements per row)
        views and then flat, and the dense loop's probe (`probe_rows`), checked (`_check_dense`) the
        first time and again whenever either tensor's memory, shape, strides or dtype changed
        (`param.data = ...`, `load_state_dict`): a step then checks only the gradients."""
        key = (param.data_ptr(), sums.data_ptr(), param.dtype, sums.dtype, param.stride(), sums.stride(),
               param.device, sums.device, param.shape, sums.shape, param.is_sparse, sums.is_sparse)
        held = self._checked.get(param)
        if held is None or held[0] != key:
            _check_dense(param, number, index)
            _check_dense(sums, number, index, "'s sum", param.shape)
            held = self._checked[param] = (key, _flat_rows(param), _flat_rows(sums), param.detach().view(-1),
                                           sums.detach().view(-1), np.empty((probe_rows(param.numel()), 16),
                                                                            np.float32))
        return held


def _where(number: int, index: int) -> str:
    return f"cortex_tvm.optim.Adagrad: parameter {index} of group {number}"


def _cpu_target(target) -> str:
    """`target` as the string `_kernels` keys on; ValueError unless it is CPU code this CPU runs
    (AVX-512 loops on an AVX2 machine would stop the process at the first step)."""
    from .integrity import cannot_run_here
    from .target import make_target
    made = make_target(target)
    if made.kind.name != "llvm":
        raise ValueError(f"cortex_tvm.optim.Adagrad: target {made.kind.name!r}: its loops are CPU code "
                         "(an LLVM target); the parameters are CPU tensors")
    reason = cannot_run_here(made)
    if reason is not None:
        raise ValueError(f"cortex_tvm.optim.Adagrad: target {str(made)!r}: {reason}")
    return str(made)


def _check_dense(tensor, number: int, index: int, what: str = "", shape=None):
    """ValueError unless `tensor` (parameter `index` of group `number`, or its `what`) is a dense,
    contiguous float32 CPU tensor (of `shape`)."""
    if tensor.is_sparse or tensor.dtype != torch.float32 or tensor.device.type != "cpu":
        raise ValueError(f"{_where(number, index)}{what}: a float32 CPU tensor is needed, got {tensor.dtype} on "
                         f"{tensor.device}{' (sparse)' if tensor.is_sparse else ''}")
    if not tensor.is_contiguous():
        raise ValueError(f"{_where(number, index)}{what}: a contiguous tensor is needed (call .contiguous() on it)")
    if shape is not None and tensor.shape != shape:
        raise ValueError(f"{_where(number, index)}{what}: shape {tuple(tensor.shape)}, the parameter's is "
                         f"{tuple(shape)}")


def _flat_rows(tensor):
    """`tensor`'s memory as (rows, elements per row)."""
    return tensor.detach().view(tensor.shape[0], -1)


def _sparse_rows(grad, param, number: int, index: int):
    """(rows, values) of a sparse gradient of whole rows of `param`, coalesced: int64 (m,) and
    float32 (m, elements per row) tensors; ValueError unless its rows are rows of `param`."""
    if grad.shape != param.shape or grad.sparse_dim() != 1 or grad.dtype != torch.float32:
        raise ValueError(f"{_where(number, index)}: a sparse gradient of whole rows is needed (sparse_dim 1, "
                         f"float32, the parameter's shape {tuple(param.shape)}), got sparse_dim {grad.sparse_dim()}, "
                         f"{grad.dtype}, {tuple(grad.shape)}")
    found = grad._indices()[0].numpy()
    disordered = len(found) > 1 and bool((found[1:] <= found[:-1]).any())
    if disordered and not grad.is_coalesced():
        # (as torch.optim.Adagrad: a repeated row's values summed).  Rows already distinct and sorted
        # need none: autograd drops the flag of the gradient `as_torch` made coalesced, and
        # coalesce() then sorts them again (about 0.1 ms of a step at batch 25)
        grad = grad.coalesce()
        found, disordered = grad._indices()[0].numpy(), False
    if disordered or len(found) and (found[0] < 0 or found[-1] >= param.shape[0]):
        raise ValueError(f"{_where(number, index)}: the sparse gradient's rows must be distinct, sorted and inside "
                         f"[0, {param.shape[0]}) (a coalesced tensor's); got {found.min()}..{found.max()}")
    values = grad._values().reshape(len(found), math.prod(param.shape[1:])).contiguous()
    return torch.from_numpy(np.ascontiguousarray(found, np.int64)), values
