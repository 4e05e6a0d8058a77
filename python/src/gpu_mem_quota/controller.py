"""The controller: which micro-batch (and whether activation checkpointing) the next optimizer step uses.

It keeps the effective batch exactly (only divisors of it are ever used as micro-batches), shrinks
before a predicted breach, retries an out-of-memory step at a smaller micro-batch, and grows back
only after a run of steps with clear headroom (hysteresis, so that it does not flap). Every change
is one log line and one `Decision`.

It knows nothing of any framework: the adapters (`gpu_mem_quota.pytorch`, `.lightning`,
`.transformers`, `.deepspeed`) feed it measurements and apply what it decides.

Its lines go to the `gpu_mem_quota.controller` logger (decisions at INFO, what cannot go on at WARNING),
or to a `log=` callable instead.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass, replace
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ._log import LogCallable, emit
from .geometry import BatchGeometry
from .model import MemoryModel, MicroStepMemory
from .node import Prediction, RestartHints, read_quota, read_restart_hints

# What a CUDA context, cuBLAS/cuDNN workspaces and the like take outside the framework's allocator
# (the plugin's default context reserve, docs/HINTS.md "The fraction").
CONTEXT_RESERVE_BYTES = 512 << 20
SAFETY_MARGIN = 0.05


def memory_budget(quota_bytes: Optional[int], device_bytes: Optional[int] = None, margin: float = SAFETY_MARGIN,
                  context_reserve_bytes: int = CONTEXT_RESERVE_BYTES) -> Optional[int]:
    """What this process's allocator may hold at its peak: the quota (or the device, if smaller) less a
    safety margin and the context reserve. None when neither is known: then only OOMs steer."""
    limits = [b for b in (quota_bytes, device_bytes) if b is not None]
    if not limits:
        return None
    return max(0, int(min(limits) * (1 - margin)) - context_reserve_bytes)


logger = logging.getLogger(__name__)


def log_to_stderr(line: str) -> None:
    """A `log=` callable that prints each line to stderr, as the package did by default before it logged
    through `logging`; kept for callers that pass it."""
    print(f"gpu-mem-quota: {line}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class ControllerConfig:
    budget_bytes: Optional[int]  # memory_budget(...); None: react to OOMs only
    grow_below: float = 0.85  # grow back only when the larger micro-batch is predicted under this share
    grow_after_steps: int = 20  # ... for this many optimizer steps in a row
    oom_capacity_share: float = 0.95  # after an OOM, trust at most this share of what was predicted to fail
    allow_activation_checkpointing: bool = True
    grow_back: bool = True  # off where a change costs a restart: one to grow would cost more than it gains


@dataclass(frozen=True)
class Decision:
    step: int  # the optimizer step of this process it applies to (0 = before the first)
    action: str  # start, shrink, grow, oom-retry, watchdog-warning, checkpointing-on, checkpointing-off, agreed
    before: BatchGeometry
    after: BatchGeometry
    activation_checkpointing: bool  # in force after the decision
    reason: str

    def line(self) -> str:
        checkpointing = ", activation checkpointing" if self.activation_checkpointing else ""
        # Counted from this process's start (0: before its first step), not from the run's: a resumed run
        # starts again at 1; the checkpoint's own step count is the run's.
        return (f"step {self.step} of this process: {self.action} {self.before} -> {self.after}{checkpointing}: "
                f"{self.reason}")


def starting_geometry(declared: BatchGeometry, hints: Optional[RestartHints] = None,
                      resumed: Optional[BatchGeometry] = None) -> Tuple[BatchGeometry, str]:
    """The geometry a run starts with, and where it came from: never larger than the declared one, than
    the one the previous run ended with (it may have shrunk in flight), or than the restart hints allow."""
    geometry, source = declared, "declared"
    if resumed is not None and resumed.effective == declared.effective and resumed.micro < geometry.micro:
        geometry, source = resumed, "checkpoint"
    if hints is not None:
        if hints.geometry is not None and hints.geometry.effective == declared.effective:
            if hints.geometry.micro < geometry.micro:
                geometry, source = hints.geometry, "restart hints"
        elif hints.batch_scale < 1:
            scaled = declared.largest_micro_at_most(int(declared.micro * hints.batch_scale))
            if scaled.micro < geometry.micro:
                geometry, source = scaled, f"batch scale {hints.batch_scale}"
    return geometry, source


class BatchController:
    def __init__(self, declared: BatchGeometry, config: ControllerConfig, start: Optional[BatchGeometry] = None,
                 activation_checkpointing: bool = False, log: Optional[LogCallable] = None) -> None:
        """`log`: a callable that takes each line instead of the module's logger."""
        if start is not None and start.effective != declared.effective:
            raise ValueError(f"start {start} and declared {declared} have different effective batches")
        self.declared = declared
        self.config = config
        self.geometry = start or declared
        self.activation_checkpointing = activation_checkpointing
        self.decisions: List[Decision] = []
        self.step = 0
        self._log = log
        # Checkpointing changes what a sample costs, so each mode has its own fit.
        self._models: Dict[bool, MemoryModel] = {False: MemoryModel(), True: MemoryModel()}
        self._learned_capacity: Optional[int] = None  # lowered by OOMs and watchdog warnings
        self._calm_steps = 0
        self._last_seq_len: Optional[int] = None

    @classmethod
    def from_environment(cls, declared: BatchGeometry, resumed: Optional[BatchGeometry] = None,
                         device_bytes: Optional[int] = None, context_reserve_bytes: int = CONTEXT_RESERVE_BYTES,
                         env: Mapping[str, str] = os.environ, log: Optional[LogCallable] = None,
                         **overrides: Any) -> "BatchController":
        """A controller for this job: its budget from the quota (and the device, if smaller), its start from
        the hints and the checkpoint; `overrides` are ControllerConfig fields."""
        quota = read_quota(env)
        hints = read_restart_hints(env)
        start, source = starting_geometry(declared, hints, resumed)
        checkpointing = bool(hints and hints.activation_checkpointing)
        budget = memory_budget(quota.bytes if quota else None, device_bytes,
                               context_reserve_bytes=context_reserve_bytes)
        config = replace(ControllerConfig(budget), **overrides)
        controller = cls(declared, config, start, checkpointing, log)
        if config.budget_bytes == 0:
            limit = min(b for b in (quota.bytes if quota else None, device_bytes) if b is not None)
            emit(logger, log, logging.WARNING,
                 f"warning: a budget of 0 bytes: {format_bytes(limit)} less {SAFETY_MARGIN:.0%} is under the "
                 f"{format_bytes(context_reserve_bytes)} context reserve; every step will shrink to micro-batch 1 "
                 f"(ask for a larger --gpu-mem, or pass a smaller context_reserve_bytes)")
        why = f"from {source}"
        if hints is not None:
            why += (f" (restart {hints.restarts} after {hints.last_event}, "
                    f"last peak {format_bytes(hints.last_peak_bytes)})")
        controller._decide("start", declared, why)
        return controller

    @property
    def model(self) -> MemoryModel:
        return self._models[self.activation_checkpointing]

    @property
    def capacity_bytes(self) -> Optional[int]:
        """The budget, lowered by what OOMs and the watchdog have taught this run."""
        known = [c for c in (self.config.budget_bytes, self._learned_capacity) if c is not None]
        return min(known) if known else None

    # --- what the adapters report -------------------------------------------------------------------------

    def record_micro_step(self, sample: MicroStepMemory) -> None:
        self.model.observe(sample)
        self._last_seq_len = sample.seq_len

    def record_optimizer_step(self, allocated_bytes: int) -> None:
        """After the optimizer stepped, before the gradients are dropped: the fixed part at its largest."""
        self.model.observe_fixed(allocated_bytes)

    def plan_step(self, seq_len: int) -> BatchGeometry:
        """Before an optimizer step whose samples have `seq_len` tokens: the geometry to run it at."""
        self.step += 1
        predicted = self.model.predict(seq_len, self.geometry.micro)
        capacity = self.capacity_bytes
        if predicted is None or capacity is None:
            return self.geometry
        if predicted > capacity:
            self._calm_steps = 0
            fitting = self._largest_fitting(seq_len, capacity, below=self.geometry.micro)
            if fitting is not None:
                self._shrink("shrink", fitting, f"predicted {format_bytes(predicted)} at seq {seq_len} "
                                                f"> capacity {format_bytes(capacity)}")
            elif self.geometry.micro > 1:
                self._shrink("shrink", self.geometry.with_micro(1),
                             f"predicted {format_bytes(predicted)} at seq {seq_len}; "
                             f"no micro-batch fits {format_bytes(capacity)}")
            self._checkpoint_if_needed(seq_len, capacity)
        else:
            self._maybe_grow(seq_len, capacity)
        return self.geometry

    def on_oom(self, seq_len: int) -> Optional[BatchGeometry]:
        """The step ran out of memory: the geometry to retry the same batch at, None when nothing smaller is left."""
        failed = self.geometry
        self._calm_steps = 0
        predicted = self.model.predict(seq_len, failed.micro)
        if predicted is not None:
            self._lower_capacity(int(predicted * self.config.oom_capacity_share))
        capacity = self.capacity_bytes
        smaller = None
        if failed.micro > 1:
            if capacity is not None and self.model.calibrated:
                smaller = self._largest_fitting(seq_len, capacity, below=failed.micro) or failed.with_micro(1)
            else:
                smaller = failed.largest_micro_at_most(failed.micro // 2)  # nothing to go by yet: halve
        if smaller is not None:
            self._shrink("oom-retry", smaller, f"out of memory at seq {seq_len}; retrying the same batch")
            return self.geometry
        if self.config.allow_activation_checkpointing and not self.activation_checkpointing:
            self.activation_checkpointing = True
            self._decide("checkpointing-on", failed, f"out of memory at micro-batch 1, seq {seq_len}")
            return self.geometry
        emit(logger, self._log, logging.WARNING, f"step {self.step} of this process: out of memory at "
                                                 f"micro-batch 1, seq {seq_len}, with nothing left to shrink")
        return None

    def on_watchdog_warning(self, prediction: Prediction) -> BatchGeometry:
        """The status file predicts the quota will be crossed: take its scale for the per-step memory."""
        self._calm_steps = 0
        scale = prediction.suggested_batch_scale
        seq_len = self._last_seq_len
        predicted = None if seq_len is None else self.model.predict(seq_len, self.geometry.micro)
        why = f"watchdog predicts the quota in {prediction.seconds_to_quota} s, suggests scale {scale:.2f}"
        if seq_len is not None and predicted is not None:
            # The watchdog sees the whole process (NVML); scale our own per-step part as it says.
            fixed = self.model.fixed_bytes
            allowed = int(fixed + scale * (predicted - fixed))
            self._lower_capacity(allowed)
            target = self._largest_fitting(seq_len, allowed, below=self.geometry.micro + 1)
        else:
            target = self.geometry.largest_micro_at_most(int(self.geometry.micro * scale))
        if target is None or target.micro >= self.geometry.micro:
            target = self.geometry.next_smaller()
        if target is not None:
            self._shrink("watchdog-warning", target, why)
        return self.geometry

    def follow(self, geometry: BatchGeometry, activation_checkpointing: bool, reason: str) -> BatchGeometry:
        """Run what the ranks of a data-parallel job agreed (`gpu_mem_quota.distributed`) instead of what
        this process proposed; one `agreed` decision when they differ."""
        if geometry.effective != self.geometry.effective:
            raise ValueError(f"agreed {geometry} and running {self.geometry} have different effective batches")
        if (geometry, activation_checkpointing) != (self.geometry, self.activation_checkpointing):
            self._calm_steps = 0
            before, self.geometry, self.activation_checkpointing = self.geometry, geometry, activation_checkpointing
            self._decide("agreed", before, reason)
        return self.geometry

    # --- the decisions ----------------------------------------------------------------------------------

    def _largest_fitting(self, seq_len: int, capacity: int, below: int) -> Optional[BatchGeometry]:
        for micro in reversed(self.geometry.micro_batches()):
            if micro < below:
                predicted = self.model.predict(seq_len, micro)
                if predicted is not None and predicted <= capacity:
                    return self.geometry.with_micro(micro)
        return None

    def _checkpoint_if_needed(self, seq_len: int, capacity: int) -> None:
        predicted = self.model.predict(seq_len, 1)
        if (self.geometry.micro == 1 and predicted is not None and predicted > capacity
                and self.config.allow_activation_checkpointing and not self.activation_checkpointing):
            self.activation_checkpointing = True
            self._decide("checkpointing-on", self.geometry,
                         f"micro-batch 1 predicted at {format_bytes(predicted)} > capacity {format_bytes(capacity)}")

    def _maybe_grow(self, seq_len: int, capacity: int) -> None:
        """One notch up (checkpointing off first, then the next micro-batch) after enough calm steps."""
        if not self.config.grow_back:
            return
        plain = self._models[False]
        if self.activation_checkpointing:
            candidate, predicted = self.geometry, plain.predict(seq_len, self.geometry.micro)
        else:
            larger = self.geometry.next_larger()
            if larger is None or larger.micro > self.declared.micro:
                self._calm_steps = 0
                return
            candidate, predicted = larger, plain.predict(seq_len, larger.micro)
        if predicted is None or predicted > self.config.grow_below * capacity:
            self._calm_steps = 0
            return
        self._calm_steps += 1
        if self._calm_steps < self.config.grow_after_steps:
            return
        self._calm_steps = 0
        why = (f"{self.config.grow_after_steps} steps with headroom: predicted {format_bytes(predicted)} "
               f"at seq {seq_len} <= {self.config.grow_below:.0%} of {format_bytes(capacity)}")
        before = self.geometry
        if self.activation_checkpointing:
            self.activation_checkpointing = False
            self._decide("checkpointing-off", before, why)
        else:
            self.geometry = candidate
            self._decide("grow", before, why)

    def _lower_capacity(self, learned: int) -> None:
        if self._learned_capacity is None or learned < self._learned_capacity:
            self._learned_capacity = learned

    def _shrink(self, action: str, to: BatchGeometry, reason: str) -> None:
        before, self.geometry = self.geometry, to
        self._decide(action, before, reason)

    def _decide(self, action: str, before: BatchGeometry, reason: str) -> None:
        decision = Decision(self.step, action, before, self.geometry, self.activation_checkpointing, reason)
        self.decisions.append(decision)
        emit(logger, self._log, logging.INFO, decision.line())


def format_bytes(nbytes: int) -> str:
    """Binary units, as Slurm writes sizes: 40.00 GiB, 1.50 MiB."""
    for shift, unit in ((40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):.2f} {unit}"
    return f"{nbytes} B"
