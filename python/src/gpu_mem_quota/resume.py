"""Resuming mid-epoch with the batch exact: the samples of each optimizer step are fixed by the step, not by
the micro-batch, so a run that restarts at another micro-batch goes on with the next step's samples.

    sampler = StepBatchSampler(len(dataset), micro=geometry.micro, effective=geometry.effective,
                               steps_done=steps_done, seed=0)
    loader = DataLoader(dataset, batch_sampler=sampler)

Each epoch's order is a permutation drawn from `seed` and the epoch (or the dataset's order, seed None),
cut into effective batches and each of those into micro-batches; a resumed loader starts at the step
after `steps_done`, in its epoch (`set_epoch` chooses the epoch, as with DistributedSampler). An
ordinary DataLoader cannot do this: its position is counted in micro-batches of the size it was built
with, and a shuffling one draws a new order at every start.
"""

from __future__ import annotations

from typing import Iterator, List, Optional

import torch
from torch.utils.data import Sampler


class StepBatchSampler(Sampler[List[int]]):
    def __init__(self, num_samples: int, micro: int, effective: int, steps_done: int = 0,
                 seed: Optional[int] = None) -> None:
        """`steps_done` optimizer steps counted from the start of the run (all epochs). An epoch's last,
        incomplete effective batch is left out, so that every step has `effective` samples."""
        if micro < 1 or effective % micro:
            raise ValueError(f"micro-batch {micro} does not divide the effective batch {effective}")
        if num_samples < effective:
            raise ValueError(f"{num_samples} samples make no effective batch of {effective}")
        if steps_done < 0:
            raise ValueError(f"steps_done={steps_done}: must be at least 0")
        self.num_samples, self.micro, self.effective, self.seed = num_samples, micro, effective, seed
        self.steps_per_epoch = num_samples // effective
        self.resume_epoch, self.resume_step = divmod(steps_done, self.steps_per_epoch)
        self.epoch = self.resume_epoch

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration yields, as DistributedSampler takes it (Lightning calls this at
        every epoch's start; a plain loop calls it before each epoch's `for`)."""
        self.epoch = epoch

    @property
    def first_step(self) -> int:
        """The epoch's first step this sampler yields: the resume point in the epoch resumed, else 0."""
        return self.resume_step if self.epoch == self.resume_epoch else 0

    def order(self, epoch: int) -> List[int]:
        if self.seed is None:
            return list(range(self.num_samples))
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(self.num_samples, generator=generator).tolist()

    def __iter__(self) -> Iterator[List[int]]:
        """This epoch's micro-batches; the next iter() is the next epoch's, where no `set_epoch` says
        otherwise (Lightning 2.x calls it on a loader's sampler, not on its batch sampler)."""
        order, first = self.order(self.epoch), self.first_step
        self.epoch += 1
        return self._micro_batches(order, first)

    def _micro_batches(self, order: List[int], first: int) -> Iterator[List[int]]:
        for step in range(first, self.steps_per_epoch):
            indices = order[step * self.effective:(step + 1) * self.effective]
            for start in range(0, len(indices), self.micro):
                yield indices[start:start + self.micro]

    @property
    def micro_batches_done(self) -> int:
        """Micro-batches of the resumed epoch before the first one this sampler yields."""
        return self.resume_step * (self.effective // self.micro)

    def __len__(self) -> int:
        """Micro-batches in a whole epoch, those before the resume point included: frameworks count an
        epoch by its length (Lightning's `num_training_batches`) and a resumed one by what was done of it."""
        return self.steps_per_epoch * (self.effective // self.micro)
