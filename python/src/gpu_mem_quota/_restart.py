"""What the restart-based adapters share: measure each step, plan the next, and say when the framework
must checkpoint and restart because the micro-batch it was built with is no longer the right one.
The geometry planned rides in the framework's checkpoint (each adapter's state); only an OOM, which
ends the run with no checkpoint, leaves it in the geometry file.

Under torch.distributed (a process group of several ranks up when a step ends) the ranks agree at
every step's end (`gpu_mem_quota.distributed`): all of them restart, at the most conservative
geometry, or none. The frameworks call the callbacks on every rank at the same steps.
An OOM inside the framework's step cannot be agreed on: the other ranks may be waiting in one of its
collectives. That rank leaves its smaller geometry in the geometry file, so give every rank the same
geometry file (a path they all see): the restart then starts every rank from it."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Optional, Tuple

from .checkpoint import GeometryFile
from .controller import BatchController
from .distributed import RankAgreement, follow, proposal_of, rank_agreement
from .geometry import BatchGeometry
from .model import MicroStepMemory
from .pytorch import MemorySource


class StepObserver:
    def __init__(self, controller: BatchController, memory: MemorySource, geometry_file: GeometryFile,
                 sequence_length: Callable[[int], int]) -> None:
        self.controller, self.memory, self.geometry_file = controller, memory, geometry_file
        # Shrinking here costs a restart that saves the run; growing would cost one to gain a little speed.
        controller.config = replace(controller.config, grow_back=False)
        self.sequence_length = sequence_length  # optimizer step -> the tokens per sample it trains on
        # What the framework was built with.
        self.running: Tuple[BatchGeometry, bool] = (controller.geometry, controller.activation_checkpointing)
        self._baseline = 0
        self._agreement: Optional[RankAgreement] = None
        self._agreement_known = False  # the framework sets up its process group after the callbacks are made

    def begin(self) -> None:
        self._baseline = self.memory.begin_micro_step()

    def end(self, step: int) -> bool:
        """After a measured stretch (a micro-step or a whole accumulation cycle) of optimizer step `step`;
        True when the next step needs another geometry: the framework saves its checkpoint and stops."""
        allocated, reserved = self.memory.peak()
        micro = self.running[0].micro
        self.controller.record_micro_step(
            MicroStepMemory(self.sequence_length(step), micro, self._baseline, allocated, reserved))
        geometry = self.controller.plan_step(self.sequence_length(step + 1))
        agreement = self._ranks()
        if agreement is not None:
            geometry = follow(self.controller, agreement.agree(proposal_of(self.controller)), agreement.rank)
        return (geometry, self.controller.activation_checkpointing) != self.running

    def _ranks(self) -> Optional[RankAgreement]:
        if not self._agreement_known:
            self._agreement, self._agreement_known = rank_agreement(), True
        return self._agreement

    def on_oom(self, step: int) -> None:
        """The framework's step ran out of memory and the run is ending: leave the smaller geometry behind."""
        if self.controller.on_oom(self.sequence_length(step)) is not None:
            planned = (self.controller.geometry, self.controller.activation_checkpointing)
            if planned != self.running:
                self.geometry_file.save(*planned)
