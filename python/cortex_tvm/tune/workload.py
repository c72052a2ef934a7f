"""What a tuning record is about: the model's sizes, the target and the batch size."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from ..target import cpu_info, make_target


def target_key(target) -> str:
    """"llvm:<mcpu>/<isa>" for a CPU, the kind for anything else (see Workload)."""
    tgt = make_target(target)
    return f"llvm:{cpu_info(tgt).key}" if tgt.kind.name == "llvm" else tgt.kind.name


@dataclass(frozen=True)
class Workload:
    """The key of a tuning record: records of equal workloads are comparable.

    `target` names the code a record was measured with: for a CPU the LLVM
    CPU and its vector ISA ("llvm:znver4/avx512", "llvm:haswell/avx2"), so a
    record made on one CPU is never applied to another; for a GPU the kind
    ("cuda").  The full target string is kept in each record too.
    """

    model: str
    hidden: int
    embed: int
    vocab: int
    target: str
    batch_size: int | None
    #: compile(precision=...): a bf16 build's records are never applied to an fp32 build
    precision: str = "fp32"

    @classmethod
    def of(cls, model, target="llvm", batch_size: int | None = 10, precision: str = "fp32") -> "Workload":
        hidden = int(model.hidden_size)
        return cls(type(model).__name__, hidden, int(getattr(model, "embed_size", hidden)),
                   int(getattr(model, "vocab_size", 0) or 0), target_key(target),
                   None if batch_size is None else int(batch_size), precision)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "Workload":
        return cls(str(data["model"]), int(data["hidden"]), int(data["embed"]), int(data["vocab"]),
                   str(data["target"]), int(data["batch_size"]), str(data.get("precision", "fp32")))

    def same_kind(self, other: "Workload") -> bool:
        """Same model class and target: its knobs are worth trying here."""
        return self.model == other.model and self.target == other.target and self.precision == other.precision

    def distance(self, other: "Workload") -> tuple:
        """How far `other` is, for `nearest`: hidden size first, then batch size, then the rest."""
        def gap(a, b):
            return abs(math.log(max(a, 1)) - math.log(max(b, 1)))
        return (gap(self.hidden, other.hidden), gap(self.batch_size, other.batch_size),
                gap(self.embed, other.embed) + gap(self.vocab, other.vocab))

    def __str__(self) -> str:
        return (f"{self.model}(H={self.hidden}, E={self.embed}, V={self.vocab}) "
                f"on {self.target}, batch {'any' if self.batch_size is None else self.batch_size}"
                + ("" if self.precision == "fp32" else f", {self.precision}"))
