"""The Hugging Face Trainer: a callback that measures every optimizer step and asks the Trainer to save
and stop when the micro-batch must change; the next run starts with `training_arguments`.

What works where:
  * mid-run, nothing about the micro-batch: `per_device_train_batch_size` and
    `gradient_accumulation_steps` are read once, when the Trainer builds its DataLoader. The callback
    measures each accumulation cycle, predicts the next, and when another geometry is needed (or a step
    ran out of memory) writes the geometry file and sets `should_save` and `should_training_stop`;
  * at the restart, `training_arguments` gives the values for `TrainingArguments`, and
    `trainer.train(resume_from_checkpoint=True)` resumes at the same optimizer step.
`auto_find_batch_size` (Accelerate's) is not the same thing: it shrinks the batch without raising the
accumulation, so the effective batch, and the training, change.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional

import torch
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from ._restart import StepObserver
from .checkpoint import GeometryFile
from .controller import BatchController
from .pytorch import CudaMemory, MemorySource


class QuotaTrainerCallback(TrainerCallback):
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
