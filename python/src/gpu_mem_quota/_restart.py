"""What the restart-based adapters share: measure each step, plan the next, and say when the framework
must checkpoint and restart because the micro-batch it was built with is no longer the right one."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from .checkpoint import GeometryFile
from .controller import BatchController
from .model import MicroStepMemory
from .pytorch import MemorySource


class StepObserver:
    def __init__(self, controller: BatchController, memory: MemorySource, geometry_file: GeometryFile,
                 sequence_length: Callable[[int], int]) -> None:
        self.controller, self.memory, self.geometry_file = controller, memory, geometry_file
        # Shrinking here costs a restart that saves the run; growing would cost one to gain a little speed.
        controller.config = replace(controller.config, grow_back=False)
        self.sequence_length = sequence_length  # optimizer step -> the tokens per sample it trains on
        self.running = (controller.geometry, controller.activation_checkpointing)  # what the framework was built with
        self._baseline = 0

    def begin(self) -> None:
        self._baseline = self.memory.begin_micro_step()

    def end(self, step: int) -> bool:
        """After a measured stretch (a micro-step or a whole accumulation cycle) of optimizer step `step`;
        True when the next step needs another geometry, saved to the geometry file for the restart."""
        allocated, reserved = self.memory.peak()
        micro = self.running[0].micro
        self.controller.record_micro_step(
            MicroStepMemory(self.sequence_length(step), micro, self._baseline, allocated, reserved))
        planned = (self.controller.plan_step(self.sequence_length(step + 1)), self.controller.activation_checkpointing)
        return self._changed(planned)

    def on_oom(self, step: int) -> None:
        """The framework's step ran out of memory and the run is ending: leave the smaller geometry behind."""
        if self.controller.on_oom(self.sequence_length(step)) is not None:
            self._changed((self.controller.geometry, self.controller.activation_checkpointing))

    def _changed(self, planned: tuple) -> bool:
        if planned == self.running:
            return False
        self.geometry_file.save(*planned)
        return True
