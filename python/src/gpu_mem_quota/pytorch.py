"""The plain PyTorch loop helper: one optimizer step over an effective batch, at the controller's geometry.

    runner = AdaptiveBatchRunner(model, optimizer, lambda x, y: loss_fn(model(x), y), controller)
    for inputs, targets in loader:             # each batch is one effective batch
        runner.step((inputs, targets), seq_len=inputs.shape[1])

Everything works mid-run here: the batch is split into micro-batches inside the step, so a new
micro-batch takes effect at the next step, and an out-of-memory micro-step is retried, with the whole
batch, at a smaller one before the optimizer steps: no step is lost and none is taken twice.

Under `torch.distributed`, pass `agreement=RankAgreement()` (`gpu_mem_quota.distributed`): every rank
then runs the same geometry at every step and retries together when any rank runs out of memory.
"""

from __future__ import annotations

import contextlib
import gc
from dataclasses import replace
from typing import Callable, ContextManager, Optional, Protocol, Sequence, Tuple

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.checkpoint import checkpoint

from .controller import BatchController
from .distributed import RankAgreement, follow, proposal_of
from .model import MicroStepMemory
from .node import StatusWatcher
from .telemetry import AllocatorSnapshot, TelemetryWriter


class MemorySource(Protocol):
    """Where the runner measures memory: the CUDA caching allocator, or a test budget."""

    def begin_micro_step(self) -> int:
        """Reset the peak counters; the bytes allocated now (the micro-step's baseline)."""

    def allocated(self) -> int: ...

    def peak(self) -> Tuple[int, int]:
        """Peak allocated and peak reserved bytes since begin_micro_step."""

    def release_cached(self) -> None:
        """Give cached, unused blocks back to the device (after an OOM)."""

    def snapshot(self) -> AllocatorSnapshot: ...


class CudaMemory:
    """The caching allocator of one CUDA device."""

    def __init__(self, device: Optional[torch.device] = None) -> None:
        if not torch.cuda.is_available():
            raise RuntimeError("CudaMemory: no CUDA device here (torch.cuda.is_available() is False); on a CPU, "
                               "pass memory=gpu_mem_quota.testing.MemoryBudget(limit_bytes, model, optimizer), "
                               "the test budget, to AdaptiveBatchRunner")
        self.device = device or torch.device("cuda", torch.cuda.current_device())

    def total_bytes(self) -> int:
        return torch.cuda.get_device_properties(self.device).total_memory

    def begin_micro_step(self) -> int:
        torch.cuda.reset_peak_memory_stats(self.device)
        return torch.cuda.memory_allocated(self.device)

    def allocated(self) -> int:
        return torch.cuda.memory_allocated(self.device)

    def peak(self) -> Tuple[int, int]:
        return torch.cuda.max_memory_allocated(self.device), torch.cuda.max_memory_reserved(self.device)

    def release_cached(self) -> None:
        torch.cuda.empty_cache()

    def snapshot(self) -> AllocatorSnapshot:
        stats = torch.cuda.memory_stats(self.device)
        return AllocatorSnapshot(
            allocated_bytes=stats.get("allocated_bytes.all.current", 0),
            reserved_bytes=stats.get("reserved_bytes.all.current", 0),
            peak_allocated_bytes=stats.get("allocated_bytes.all.peak", 0),
            peak_reserved_bytes=stats.get("reserved_bytes.all.peak", 0),
            num_alloc_retries=stats.get("num_alloc_retries", 0),
            num_ooms=stats.get("num_ooms", 0),
        )


class Checkpointed(nn.Module):
    """Wraps a block whose activations may be recomputed in the backward pass instead of kept."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block
        self.enabled = False

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        if self.enabled and self.training and torch.is_grad_enabled():
            return checkpoint(self.block, *args, use_reentrant=False)
        return self.block(*args)


def checkpointing_switch(model: nn.Module) -> Optional[Callable[[bool], None]]:
    """How to turn activation checkpointing on and off in `model`, if it says: Hugging Face models have
    gradient_checkpointing_enable/disable, others may wrap their blocks in `Checkpointed`."""
    if hasattr(model, "gradient_checkpointing_enable"):
        return lambda on: model.gradient_checkpointing_enable() if on else model.gradient_checkpointing_disable()
    blocks = [m for m in model.modules() if isinstance(m, Checkpointed)]
    if not blocks:
        return None

    def switch(on: bool) -> None:
        for block in blocks:
            block.enabled = on

    return switch


class AdaptiveBatchRunner:
    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer,
                 loss_of: Callable[..., torch.Tensor], controller: BatchController,
                 memory: Optional[MemorySource] = None, status: Optional[StatusWatcher] = None,
                 telemetry: Optional[TelemetryWriter] = None, agreement: Optional[RankAgreement] = None) -> None:
        """`loss_of(*chunk)` is the mean loss over one micro-batch (slices of the batch's tensors).
        Without a way to switch checkpointing in `model`, the controller is told not to ask for it.
        With an `agreement`, every rank of its group must call `step` once per optimizer step."""
        self.model, self.optimizer, self.loss_of = model, optimizer, loss_of
        self.agreement = agreement
        self.controller = controller
        self.memory = memory or CudaMemory()
        self.status, self.telemetry = status, telemetry
        self._switch_checkpointing = checkpointing_switch(model)
        if self._switch_checkpointing is None:
            controller.config = replace(controller.config, allow_activation_checkpointing=False)
            # A restart hint may have asked for it; the model has no way, so the fit must not pretend.
            controller.activation_checkpointing = False
        self._checkpointing_applied = False
        self._apply_checkpointing()

    def step(self, batch: Sequence[torch.Tensor], seq_len: int = 1) -> float:
        """One optimizer step over `batch` (tensors sharing their first dimension); the mean loss.
        `seq_len` is the tokens per sample, which memory grows with; leave it at 1 for data without."""
        warning = self.status.new_warning() if self.status else None
        if warning is not None:
            self.controller.on_watchdog_warning(warning)
        geometry = self.controller.plan_step(seq_len)
        if self.agreement is not None:
            agreed = self.agreement.agree(proposal_of(self.controller))
            geometry = follow(self.controller, agreed, self.agreement.rank)
        while True:
            self._apply_checkpointing()
            message = None
            try:
                with self._local_gradients():
                    loss = self._accumulate(batch, geometry.micro, seq_len)
            except torch.cuda.OutOfMemoryError as error:
                message = str(error)
            retry = None
            if message is not None:
                # Outside the except clause, so that the traceback's frames (and their tensors) are gone.
                self._drop_gradients()
                retry = self.controller.on_oom(seq_len)
            if self.agreement is None:
                if message is None:
                    break
                if retry is None:
                    raise torch.cuda.OutOfMemoryError(message)
                geometry = retry
                continue
            # The ranks meet here after every attempt, OOM or not, and none is in a collective yet.
            agreed = self.agreement.agree(proposal_of(self.controller, out_of_memory=message is not None,
                                                      exhausted=message is not None and retry is None))
            if agreed.give_up:
                raise torch.cuda.OutOfMemoryError(
                    message or f"rank {self.agreement.rank}: another rank ran out of memory at micro-batch 1 "
                               "with nothing smaller left; every rank ends the run")
            geometry = follow(self.controller, agreed, self.agreement.rank)
            if not agreed.retry:
                break
            if message is None:
                self._drop_gradients()  # another rank failed: this rank does the same batch again too
        if self.agreement is not None and isinstance(self.model, DistributedDataParallel):
            self.agreement.average_gradients(self.model)
        self.optimizer.step()
        self.controller.record_optimizer_step(self.memory.allocated())
        self.optimizer.zero_grad(set_to_none=True)
        if self.telemetry is not None:
            self.telemetry.write(self.memory.snapshot(), self.controller)
        return loss

    def _drop_gradients(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        gc.collect()
        self.memory.release_cached()

    def _local_gradients(self) -> ContextManager[object]:
        """With an agreement, DDP's gradient all-reduce must not run inside a backward pass that another
        rank may never reach (its OOM): every micro-step runs under `no_sync`, and the runner averages
        the gradients after the ranks agreed."""
        if self.agreement is not None and isinstance(self.model, DistributedDataParallel):
            return self.model.no_sync()
        return contextlib.nullcontext()

    def _accumulate(self, batch: Sequence[torch.Tensor], micro: int, seq_len: int) -> float:
        size = len(batch[0])
        total = 0.0
        for start in range(0, size, micro):
            chunk = [tensor[start:start + micro] for tensor in batch]
            baseline = self.memory.begin_micro_step()
            # Each micro-batch's mean loss, weighted by its share of the batch: the gradients add up
            # to those of the whole batch at once, whatever the micro-batch.
            loss = self.loss_of(*chunk) * (len(chunk[0]) / size)
            loss.backward()
            peak_allocated, peak_reserved = self.memory.peak()
            self.controller.record_micro_step(
                MicroStepMemory(seq_len, len(chunk[0]), baseline, peak_allocated, peak_reserved))
            total += loss.item()
        return total

    def _apply_checkpointing(self) -> None:
        wanted = self.controller.activation_checkpointing
        if self._switch_checkpointing is not None and wanted != self._checkpointing_applied:
            self._switch_checkpointing(wanted)
            self._checkpointing_applied = wanted
