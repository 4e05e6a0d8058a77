"""Lightning: a callback that measures every batch and stops for a checkpoint-and-restart when the
micro-batch must change.

What works where:
  * mid-run, nothing about the micro-batch: the DataLoader was built with it. The callback measures,
    predicts, and when the next step needs another geometry (or a step ran out of memory) it writes
    the geometry file, saves a Lightning checkpoint and stops the trainer;
  * at the restart, `starting_values` gives the batch size, `accumulate_grad_batches` and the
    checkpointing flag to build the DataLoader and the Trainer with; `trainer.fit(ckpt_path=...)` resumes.
For changes mid-run without a restart, call `gpu_mem_quota.pytorch.AdaptiveBatchRunner` from a
LightningModule with manual optimization (`self.automatic_optimization = False`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, Optional

import lightning.pytorch as pl
import torch

from ._restart import StepObserver
from .checkpoint import GeometryFile
from .controller import BatchController
from .pytorch import CudaMemory, MemorySource


class QuotaBatchCallback(pl.Callback):
    def __init__(self, controller: BatchController, checkpoint_path: Path, geometry_file: GeometryFile,
                 sequence_length: Callable[[int], int] = lambda step: 1,
                 memory: Optional[MemorySource] = None) -> None:
        self.checkpoint_path = checkpoint_path
        self.observer = StepObserver(controller, memory or CudaMemory(), geometry_file, sequence_length)

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        self.observer.begin()

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        cycle_done = (batch_idx + 1) % trainer.accumulate_grad_batches == 0
        if cycle_done and self.observer.end(trainer.global_step - 1):
            trainer.save_checkpoint(self.checkpoint_path)
            trainer.should_stop = True

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        if isinstance(exception, torch.cuda.OutOfMemoryError):
            self.observer.on_oom(trainer.global_step)


def starting_values(controller: BatchController) -> Dict[str, Any]:
    """The DataLoader's batch size and the Trainer's accumulation for this run."""
    return {"batch_size": controller.geometry.micro,
            "accumulate_grad_batches": controller.geometry.accum,
            "activation_checkpointing": controller.activation_checkpointing}


class ResumeAtStep(pl.Callback):
    """With a `gpu_mem_quota.resume.StepBatchSampler`, a run resumed mid-epoch at another micro-batch goes on
    with the next optimizer step's samples, all of them in its first step.

    Lightning counts the position in an epoch in micro-batches of the size the checkpoint was written
    at, and closes an accumulation cycle where that count is a multiple of the accumulation: after a
    geometry change its first step took a fraction of a batch. This recounts the position in the new
    micro-batches from the sampler, which knows how many steps are done."""

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        epoch_loop = trainer.fit_loop.epoch_loop
        done = self.sampler.micro_batches_done
        # The epoch loop's reset, after this hook, counts once more the batch a checkpoint written at a
        # batch's end was written in (Lightning 2.x), then sets every counter to the completed one.
        if getattr(epoch_loop, "restarted_on_train_batch_end", False):
            done -= 1
        progress = epoch_loop.batch_progress.current
        progress.ready = progress.started = progress.processed = progress.completed = done
