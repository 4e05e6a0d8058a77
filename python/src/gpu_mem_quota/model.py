"""How a training step's peak memory depends on its sequence length S and micro-batch B, fitted online.

    peak(S, B) = fixed + B * (a + b * S) + allocator slack

`fixed` (weights, gradients, optimizer state) is measured, not fitted: it is what is allocated when a
micro-step begins. What a micro-step adds on top, divided by its micro-batch, is one sample's
activations, fitted as a line in S by least squares over the recent micro-steps. Around the last
measured step (S0, B0, M0) this is the issue's form M = M0 + alpha*dS + beta*dB (plus the product term
b*dS*dB), with alpha = B0*b and beta = a + b*S0, but fitted over many steps instead of two.

With one sequence length seen, a and b cannot be told apart; the fit then takes all per-sample memory
as proportional to S (a = 0), which over-predicts growth in S: it errs towards shrinking early.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Deque, Optional, Tuple


@dataclass(frozen=True)
class MicroStepMemory:
    """One successful forward and backward pass, as the allocator measured it."""

    seq_len: int
    micro: int
    baseline_bytes: int  # allocated when the micro-step began
    peak_allocated_bytes: int  # the allocator's peak during it
    peak_reserved_bytes: int  # what it held from the device at that peak (allocated + cached slack)

    def __post_init__(self) -> None:
        if self.seq_len < 1 or self.micro < 1:
            raise ValueError(f"a micro-step needs seq_len >= 1 and micro >= 1, not {self}")


class MemoryModel:
    def __init__(self, window: int = 64) -> None:
        self._samples: Deque[MicroStepMemory] = deque(maxlen=window)
        self.fixed_bytes = 0
        self.slack_bytes = 0  # reserved beyond allocated at the peak: what NVML sees on top

    @property
    def calibrated(self) -> bool:
        return bool(self._samples)

    def observe(self, sample: MicroStepMemory) -> None:
        self._samples.append(sample)
        # The optimizer state appears after the first step and stays: the largest baseline is the fixed part.
        self.fixed_bytes = max(self.fixed_bytes, sample.baseline_bytes)
        self.slack_bytes = max((s.peak_reserved_bytes - s.peak_allocated_bytes for s in self._samples), default=0)

    def observe_fixed(self, allocated_bytes: int) -> None:
        """What stays allocated between micro-steps, measured right after an optimizer step (weights,
        gradients, optimizer state): the first step's optimizer state comes only with that step."""
        self.fixed_bytes = max(self.fixed_bytes, allocated_bytes)

    def per_sample_line(self) -> Optional[Tuple[float, float]]:
        """(a, b) of per-sample bytes = a + b * S, or None before the first observation."""
        if not self._samples:
            return None
        points = [(s.seq_len, max(0, s.peak_allocated_bytes - s.baseline_bytes) / s.micro) for s in self._samples]
        mean_s = sum(s for s, _ in points) / len(points)
        mean_y = sum(y for _, y in points) / len(points)
        spread = sum((s - mean_s) ** 2 for s, _ in points)
        if spread == 0:
            return 0.0, mean_y / mean_s
        slope = sum((s - mean_s) * (y - mean_y) for s, y in points) / spread
        intercept = mean_y - slope * mean_s
        if slope < 0 or intercept < 0:
            # Noise, or a schedule that went down: the proportional shape is the safe one.
            return 0.0, mean_y / mean_s
        return intercept, slope

    def predict(self, seq_len: int, micro: int) -> Optional[int]:
        """Predicted peak bytes the process holds from the device for one micro-step, None before any data."""
        line = self.per_sample_line()
        if line is None:
            return None
        a, b = line
        return int(self.fixed_bytes + micro * (a + b * seq_len) + self.slack_bytes)
