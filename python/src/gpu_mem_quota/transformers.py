"""The Hugging Face Trainer: a callback that measures every optimizer step and asks the Trainer to save
and stop when the micro-batch must change; the next run starts with `training_arguments`.

What works where:
  * mid-run, nothing about the micro-batch: `per_device_train_batch_size` and
    `gradient_accumulation_steps` are read once, when the Trainer builds its DataLoader. The callback
    measures each accumulation cycle, predicts the next, and when another geometry is needed sets
    `should_save` and `should_training_stop`; its save hook writes the geometry into the checkpoint's
    directory (`checkpoint-N/gpu_mem_quota.json`), where it goes with the checkpoint. An out-of-memory
    error, which ends the run with no checkpoint, leaves it in the geometry file (`oom_guard`);
  * at the restart, `saved_geometry` reads both for the controller's start, `training_arguments`
    gives the values for `TrainingArguments`, and `trainer.train(resume_from_checkpoint=True)` resumes
    at the same optimizer step.
`auto_find_batch_size` (Accelerate's) is not the same thing: it shrinks the batch without raising the
accumulation, so the effective batch, and the training, change.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, Optional, Union

import torch
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from ._restart import StepObserver
from .checkpoint import GeometryFile, SavedGeometry, restart_geometry
from .controller import BatchController
from .pytorch import CudaMemory, MemorySource

# In each checkpoint's directory, beside the Trainer's trainer_state.json.
GEOMETRY_NAME = "gpu_mem_quota.json"


class QuotaTrainerCallback(TrainerCallback):
    """Measures every optimizer step, and asks the Trainer to save and stop when the next step needs
    another geometry.

    Args:
        controller: the run's controller, started at `saved_geometry(...)`'s geometry on a restart.
        geometry_file: where an out-of-memory error (`oom_guard`), which ends the run with no
            checkpoint, leaves the smaller geometry; the same path for every rank.
        sequence_length: optimizer step -> the tokens per sample it trains on.
        memory: the allocator to measure (the CUDA device's by default).

    Its save hook writes the geometry the next run starts at into the checkpoint's directory.

    Example::

        resumed = saved_geometry("out", GeometryFile("geometry.json"))
        controller = BatchController.from_environment(declared, resumed=resumed and resumed[0])
        callback = QuotaTrainerCallback(controller, GeometryFile("geometry.json"))
        args = TrainingArguments(output_dir="out", **training_arguments(controller))
        trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[callback])
        oom_guard(callback, lambda: trainer.train(resume_from_checkpoint=resumed is not None),
                  lambda: trainer.state.global_step)
    """

    def __init__(self, controller: BatchController, geometry_file: GeometryFile,
                 sequence_length: Callable[[int], int] = lambda step: 1,
                 memory: Optional[MemorySource] = None) -> None:
        self.observer = StepObserver(controller, memory or CudaMemory(), geometry_file, sequence_length)

    def on_step_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                      **kwargs: Any) -> None:
        self.observer.begin()

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    **kwargs: Any) -> None:
        # The peak of a whole accumulation cycle, later micro-steps' gradients included: it errs high.
        if self.observer.end(state.global_step - 1):  # global_step counts the step just taken
            control.should_save = True
            control.should_training_stop = True

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                **kwargs: Any) -> None:
        # The directory the Trainer just saved in (Trainer._save_checkpoint); one writer, as its own files.
        if state.is_world_process_zero:
            directory = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
            controller = self.observer.controller
            GeometryFile(directory / GEOMETRY_NAME).save(controller.geometry, controller.activation_checkpointing)


def saved_geometry(output_dir: Union[str, Path],
                   geometry_file: Optional[GeometryFile] = None) -> Optional[SavedGeometry]:
    """The geometry a restart starts at: the one in the last checkpoint's directory under `output_dir`
    (the one `resume_from_checkpoint=True` resumes from), or the geometry file's where an OOM left a
    smaller one or the checkpoint holds none; None on a first run."""
    last = get_last_checkpoint(str(output_dir)) if Path(output_dir).is_dir() else None
    in_checkpoint = GeometryFile(Path(last) / GEOMETRY_NAME).load() if last else None
    return restart_geometry(in_checkpoint, geometry_file.load() if geometry_file else None)


def oom_guard(callback: QuotaTrainerCallback, train: Callable[[], Any], step: Callable[[], int]) -> Any:
    """Run `train()`; on a CUDA OOM leave the smaller geometry for the restart, then re-raise."""
    try:
        return train()
    except torch.cuda.OutOfMemoryError:
        callback.observer.on_oom(step())
        raise


def training_arguments(controller: BatchController) -> Dict[str, Any]:
    """`TrainingArguments` batch values for this run. Activation checkpointing is the model's:
    `model.gradient_checkpointing_enable()` when `controller.activation_checkpointing`."""
    return {"per_device_train_batch_size": controller.geometry.micro,
            "gradient_accumulation_steps": controller.geometry.accum}
