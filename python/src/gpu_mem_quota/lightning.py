"""Lightning: a callback that measures every batch and stops for a checkpoint-and-restart when the
micro-batch must change.

What works where:
  * mid-run, nothing about the micro-batch: the DataLoader was built with it. The callback measures,
    predicts, and when the next step needs another geometry (or a step ran out of memory) it writes
    saves a Lightning checkpoint, with the geometry in the callback's state, and stops the trainer; an
    out-of-memory error, which ends the run with no checkpoint, leaves it in the geometry file;
  * at the restart, `saved_geometry` reads both for the controller's start, `starting_values` gives
    the batch size, `accumulate_grad_batches` and the checkpointing flag to build the DataLoader and the
    Trainer with; `trainer.fit(ckpt_path=...)` resumes.
For changes mid-run without a restart, call `gpu_mem_quota.pytorch.AdaptiveBatchRunner` from a
LightningModule with manual optimization (`self.automatic_optimization = False`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Union

import lightning.pytorch as pl
import torch

from ._restart import StepObserver
from .checkpoint import GeometryFile, SavedGeometry, geometry_from_state, geometry_state, restart_geometry
from .controller import BatchController
from .pytorch import CudaMemory, MemorySource

logger = logging.getLogger(__name__)


class QuotaBatchCallback(pl.Callback):
    """Measures every batch, and saves a checkpoint and stops when the next step needs another geometry.

    Args:
        controller: the run's controller, started at `saved_geometry(...)`'s geometry on a restart.
        checkpoint_path: where the checkpoint for the restart is saved.
        geometry_file: where an out-of-memory error, which ends the run with no checkpoint, leaves the
            smaller geometry; the same path for every rank.
        sequence_length: optimizer step -> the tokens per sample it trains on.
        memory: the allocator to measure (the CUDA device's by default).

    Its state in the checkpoint (`state_dict`) is the geometry the next run starts at.

    Example::

        resumed = saved_geometry("last.ckpt", GeometryFile("geometry.json"))
        controller = BatchController.from_environment(declared, resumed=resumed and resumed[0])
        values = starting_values(controller)
        trainer = Trainer(accumulate_grad_batches=values["accumulate_grad_batches"],
                          callbacks=[QuotaBatchCallback(controller, "last.ckpt", GeometryFile("geometry.json"))])
    """

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

    def state_dict(self) -> Dict[str, Any]:
        """The geometry the next run starts at: the one planned, which the stop is for."""
        controller = self.observer.controller
        return geometry_state(controller.geometry, controller.activation_checkpointing)

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        # Too late to act on: the DataLoader is built. A run built larger than the checkpoint says was
        # built without `saved_geometry`, and will meet the step that stopped the last one again.
        saved, _ = geometry_from_state(state_dict, "the checkpoint's QuotaBatchCallback state")
        running = self.observer.running[0]
        if running.effective == saved.effective and running.micro > saved.micro:
            logger.warning("resumed at micro-batch %s, larger than the %s the checkpoint was saved for "
                           "(start the controller from saved_geometry(...))", running, saved)


def saved_geometry(checkpoint_path: Union[str, Path],
                   geometry_file: Optional[GeometryFile] = None) -> Optional[SavedGeometry]:
    """The geometry a restart starts at: `QuotaBatchCallback`'s state in the Lightning checkpoint (read
    with `weights_only=True`: no code runs), or the geometry file's where an OOM left a smaller one
    or the checkpoint holds none; None on a first run."""
    path = Path(checkpoint_path)
    in_checkpoint = None
    if path.exists():
        state = torch.load(path, map_location="cpu", weights_only=True).get("callbacks", {})
        key = QuotaBatchCallback.__qualname__  # Callback.state_key, for a callback without extra state
        if key in state:
            in_checkpoint = geometry_from_state(state[key], f"{path}: callbacks[{key!r}]")
    return restart_geometry(in_checkpoint, geometry_file.load() if geometry_file else None)


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
