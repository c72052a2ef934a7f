"""What a tuning record is about: the model's sizes, the target and the batch size."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Workload:
    """The key of a tuning record: records of equal workloads are comparable.

    `target` is the target kind ("llvm", "cuda"); logs travel between
    machines of the same kind (the full target string is kept in each record).
    """

    model: str
    hidden: int
    embed: int
    vocab: int
    target: str
    batch_size: int | None

    @classmethod
    def of(cls, model, target="llvm", batch_size: int | None = 10) -> "Workload":
        from ..build import make_target
        hidden = int(model.hidden_size)
        return cls(type(model).__name__, hidden, int(getattr(model, "embed_size", hidden)),
                   int(getattr(model, "vocab_size", 0) or 0), make_target(target).kind.name, None if batch_size is None else int(batch_size))

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "Workload":
        return cls(str(data["model"]), int(data["hidden"]), int(data["embed"]), int(data["vocab"]),
                   str(data["target"]), int(data["batch_size"]))

    def same_kind(self, other: "Workload") -> bool:
        """Same model class and target: its knobs are worth trying here."""
        return self.model == other.model and self.target == other.target

    def distance(self, other: "Workload") -> tuple:
        """How far `other` is, for `nearest`: hidden size first, then batch size, then the rest."""
        def gap(a, b):
            return abs(math.log(max(a, 1)) - math.log(max(b, 1)))
        return (gap(self.hidden, other.hidden), gap(self.batch_size, other.batch_size),
                gap(self.embed, other.embed) + gap(self.vocab, other.vocab))

    def __str__(self) -> str:
        return (f"{self.model}(H={self.hidden}, E={self.embed}, V={self.vocab}) "
                f"on {self.target}, batch {'any' if self.batch_size is None else self.batch_size}")
