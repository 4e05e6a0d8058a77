"""How a training step's peak memory depends on its sequence length S and micro-batch B, fitted online.

    peak(S, B) = fixed + B * (a + b * S + c * S²) + allocator slack

`fixed` (weights, gradients, optimizer state) is measured, not fitted: it is what is allocated when a
micro-step begins. What a micro-step adds on top, divided by its micro-batch, is one sample's
activations, fitted by least squares over the recent micro-steps. The S² term is attention without a
fused kernel: its scores and their softmax (B x heads x S x S) are kept for the backward pass. Around
the last measured step (S0, B0, M0) the linear part is the issue's form M = M0 + alpha*dS + beta*dB
(plus the product term b*dS*dB), with alpha = B0*b and beta = a + b*S0, fitted over many steps.

Which terms: the line (c = 0) unless the measurements support the curve. With fewer than
`MIN_LENGTHS_FOR_CURVE` sequence lengths seen, a curve through them would fit anything; from there on,
each candidate predicts every seen length from the others (leave one length out) and the one that
predicts clearly better (half the squared error) is used, so a curve is taken only where it explains
memory the line cannot, not to chase noise. A curve that bends down (c < 0) is never used: it would
promise less memory at longer sequences than the measurements show.

With one sequence length seen, a and b cannot be told apart; the fit then takes all per-sample memory
as proportional to S (a = 0), which over-predicts growth in S: it errs towards shrinking early.

Not modelled: memory that does not scale with B (a B-independent S x S attention mask, say) is spread
over the samples of the micro-batch it was measured at; a shape the model cannot see (a fused attention
kernel that keeps nothing quadratic) is simply fitted as the line it is.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable, Deque, List, Optional, Sequence, Tuple


# The curve is considered from this many distinct sequence lengths on: leaving one out must leave it
# more points than its three terms.
MIN_LENGTHS_FOR_CURVE = 4
# ... and taken only where it predicts the held-out lengths with at most this share of the line's squared
# error: noise on a line lets a curve win by a little, a real S² term wins by orders of magnitude.
CURVE_MUST_CUT_ERROR_TO = 0.5


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
        """(a, b) of the line per-sample bytes = a + b * S, or None before the first observation."""
        points = self._points()
        return _line(points) if points else None

    def per_sample_curve(self) -> Optional[Tuple[float, float, float]]:
        """(a, b, c) of per-sample bytes = a + b * S + c * S², the terms the measurements support (c = 0:
        the line), or None before the first observation."""
        points = self._points()
        if not points:
            return None
        a, b = _line(points)
        lengths = sorted({s for s, _ in points})
        if len(lengths) < MIN_LENGTHS_FOR_CURVE:
            return a, b, 0.0
        curve = _curve(points)
        if curve is None or curve[2] <= 0:
            return a, b, 0.0
        line_error = _held_out_error(points, lengths, lambda rest: (*_line(rest), 0.0))
        curve_error = _held_out_error(points, lengths, _curve)
        if curve_error is None or line_error is None or curve_error > CURVE_MUST_CUT_ERROR_TO * line_error:
            return a, b, 0.0
        return curve

    def predict(self, seq_len: int, micro: int) -> Optional[int]:
        """Predicted peak bytes the process holds from the device for one micro-step, None before any data."""
        curve = self.per_sample_curve()
        if curve is None:
            return None
        a, b, c = curve
        return int(self.fixed_bytes + micro * max(0.0, a + b * seq_len + c * seq_len * seq_len) + self.slack_bytes)

    def _points(self) -> List[Tuple[int, float]]:
        return [(s.seq_len, max(0, s.peak_allocated_bytes - s.baseline_bytes) / s.micro) for s in self._samples]


Points = Sequence[Tuple[int, float]]
# A fit's a, b and c of y = a + b*S + c*S²; None where the points cannot make one.
Fit = Callable[[Points], Optional[Tuple[float, float, float]]]


def _line(points: Points) -> Tuple[float, float]:
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


def _curve(points: Points) -> Optional[Tuple[float, float, float]]:
    """Least squares for y = a + b*S + c*S², S scaled to its largest value so that the normal equations
    stay well conditioned at thousands of tokens; None where three distinct lengths are not there."""
    if len({s for s, _ in points}) < 3:
        return None
    scale = float(max(s for s, _ in points))
    rows = [(1.0, s / scale, (s / scale) ** 2, y) for s, y in points]
    # Normal equations A^T A x = A^T y, solved by Gaussian elimination with partial pivoting.
    m = [[sum(r[i] * r[j] for r in rows) for j in range(3)] + [sum(r[i] * r[3] for r in rows)] for i in range(3)]
    for col in range(3):
        pivot = max(range(col, 3), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-12:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(3):
            if r != col:
                factor = m[r][col] / m[col][col]
                m[r] = [x - factor * y for x, y in zip(m[r], m[col])]
    a, b, c = (m[i][3] / m[i][i] for i in range(3))
    return a, b / scale, c / (scale * scale)


def _held_out_error(points: Points, lengths: Sequence[int], fit: Fit) -> Optional[float]:
    """Mean squared error of predicting each seen length's samples from a fit to the other lengths."""
    total, count = 0.0, 0
    for held in lengths:
        rest = [p for p in points if p[0] != held]
        params = fit(rest)
        if params is None:
            return None
        a, b, c = params
        for s, y in points:
            if s == held:
                total += (a + b * s + c * s * s - y) ** 2
                count += 1
    return total / count if count else None
