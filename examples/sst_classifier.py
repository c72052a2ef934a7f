"""SST sentiment classifier in Relax: our compiled TreeLSTM encoder + Linear(H, 5) + softmax.

The recursive kernel is called from Relax (`cortex_tvm.relax.RecursiveCall`);
the classifier head is ordinary Relax around it; one `tvm.compile` builds
everything and the Relax VirtualMachine runs it.

    python examples/sst_classifier.py [--hidden 64] [--batch 25]
"""
from __future__ import annotations

import argparse
import os

os.environ.setdefault("TVM_NUM_THREADS", "2")

import numpy as np  # noqa: E402
import tvm  # noqa: E402
from tvm import relax  # noqa: E402

import cortex_tvm as ct  # noqa: E402
from cortex_tvm.relax import RecursiveCall  # noqa: E402

NUM_CLASSES = 5


def build_classifier(encoder, Wc, bc, target="llvm"):
    """(mod, make_inputs): `main(structure...)` -> class probabilities (B, 5)."""
    call = RecursiveCall(encoder, target)
    bb = relax.BlockBuilder()
    with bb.function("main", call.params):
        with bb.dataflow():
            roots = call.emit(bb)                                          # (B, H) root h
            logits = bb.emit(relax.op.add(relax.op.matmul(roots, relax.const(Wc.T.copy())), relax.const(bc)))
            probs = bb.emit_output(relax.op.nn.softmax(logits, axis=-1))
        bb.emit_func_output(probs)
    return bb.get(), call.make_inputs


def numpy_classifier(encoder, Wc, bc, trees):
    h = encoder.reference(trees).astype(np.float64)
    logits = h @ Wc.T.astype(np.float64) + bc
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def head_weights(hidden, seed=0):
    rng = np.random.default_rng(seed)
    bound = hidden ** -0.5
    return (rng.uniform(-bound, bound, (NUM_CLASSES, hidden)).astype(np.float32),
            rng.uniform(-bound, bound, NUM_CLASSES).astype(np.float32))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--batch", type=int, default=25)
    args = parser.parse_args()
    trees, vocab = ct.data.sst_sample()
    encoder = ct.models.TreeLSTM(hidden_size=args.hidden, vocab_size=len(vocab))
    Wc, bc = head_weights(args.hidden)
    target = ct.make_target("llvm")
    mod, make_inputs = build_classifier(encoder, Wc, bc, target)
    vm = relax.VirtualMachine(tvm.compile(mod, target=target, tir_pipeline=ct.TIR_PIPELINE), tvm.cpu())
    batch = trees[:args.batch]
    probs = vm["main"](*make_inputs(batch)).numpy()
    want = numpy_classifier(encoder, Wc, bc, batch)
    labels = np.array([t.label for t in batch])
    print(f"batch of {len(batch)} SST trees: predicted {probs.argmax(-1).tolist()}")
    print(f"gold labels             {labels.tolist()}  (untrained weights)")
    print(f"max |relax - numpy| = {np.abs(probs - want).max():.2e}")


if __name__ == "__main__":
    main()
