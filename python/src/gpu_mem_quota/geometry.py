"""Batch geometry: a micro-batch and a gradient accumulation whose product, the effective batch, never changes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional


@dataclass(frozen=True)
class BatchGeometry:
    """`micro` samples per forward/backward pass, `accum` passes per optimizer step."""

    micro: int
    accum: int

    def __post_init__(self) -> None:
        if self.micro < 1 or self.accum < 1:
            raise ValueError(f"a batch geometry needs micro >= 1 and accum >= 1, not {self}")

    @property
    def effective(self) -> int:
        """Samples per optimizer step: what the training results depend on."""
        return self.micro * self.accum

    @classmethod
    def parse(cls, text: str) -> "BatchGeometry":
        """`8x8` or `16`, as `--gpu-mem-batch` takes it."""
        parts = text.split("x")
        if len(parts) > 2 or not all(part.isdigit() and int(part) >= 1 for part in parts):
            raise ValueError(f"not a batch geometry: {text!r} (MICRO[xACCUM], e.g. 8x8)")
        return cls(int(parts[0]), int(parts[1]) if len(parts) == 2 else 1)

    def with_micro(self, micro: int) -> "BatchGeometry":
        """The same effective batch at another micro-batch, which must divide it."""
        if micro < 1 or self.effective % micro:
            raise ValueError(f"micro-batch {micro} does not divide the effective batch {self.effective}")
        return BatchGeometry(micro, self.effective // micro)

    def micro_batches(self) -> List[int]:
        """Every micro-batch that keeps the effective batch exactly, smallest first."""
        return [d for d in range(1, self.effective + 1) if self.effective % d == 0]

    def largest_micro_at_most(self, limit: int) -> "BatchGeometry":
        """The largest divisor of the effective batch that is at most `limit` (at least 1)."""
        return self.with_micro(max(d for d in self.micro_batches() if d <= max(1, limit)))

    def next_smaller(self) -> Optional["BatchGeometry"]:
        smaller = [d for d in self.micro_batches() if d < self.micro]
        return self.with_micro(smaller[-1]) if smaller else None

    def next_larger(self) -> Optional["BatchGeometry"]:
        larger = [d for d in self.micro_batches() if d > self.micro]
        return self.with_micro(larger[0]) if larger else None

    def __str__(self) -> str:
        return f"{self.micro}x{self.accum}"
