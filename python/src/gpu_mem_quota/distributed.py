"""One decision for all ranks: under `torch.distributed`, every rank runs the same geometry at the same step.

Each rank's controller decides for its own process (its own quota, status file and measurements) and
that is its *proposal*. At the step boundary the ranks exchange their proposals in one all-reduce and
all follow the most conservative one: the smallest micro-batch, activation checkpointing if any rank
wants it, a retry of the step if any rank ran out of memory, and an end of the run on every rank if any
rank has nothing smaller left. The effective batch per rank, and so the global batch, never changes:
every micro-batch proposed is a divisor of the same effective batch, and so is the smallest.

    agreement = RankAgreement()                 # after torch.distributed.init_process_group(...)
    runner = AdaptiveBatchRunner(ddp_model, optimizer, loss_of, controller, agreement=agreement)

Where the agreement sits matters. An out-of-memory error on one rank while the others wait in a
collective (DDP's gradient all-reduce in `backward`) leaves them waiting for ever. So with an
agreement the runner keeps every collective out of the micro-steps: a `DistributedDataParallel`
model's micro-steps all run under `no_sync()`, the ranks agree after the last one, and only then are
the gradients averaged (one all-reduce per parameter, as DDP would, but after the backward passes
rather than overlapped with them). A model that is not DDP-wrapped gets no gradient averaging from the
runner; its forward and backward must not run collectives of their own (FSDP and DeepSpeed ZeRO-3
gather parameters in `forward`: an OOM there is not recoverable in-process on any rank).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.distributed as dist

from .controller import BatchController
from .geometry import BatchGeometry


@dataclass(frozen=True)
class Proposal:
    """What one rank's controller wants for the next attempt at a step."""

    micro: int
    activation_checkpointing: bool
    out_of_memory: bool = False  # this attempt ran out of memory here
    exhausted: bool = False  # ... and nothing smaller is left here: the run cannot go on


@dataclass(frozen=True)
class Agreed:
    """What every rank does: the same on all of them."""

    micro: int
    activation_checkpointing: bool
    retry: bool  # some rank ran out of memory: the step is done again, at `micro`, on every rank
    give_up: bool  # some rank has nothing smaller left: every rank ends the run


def merge(proposals: "list[Proposal]") -> Agreed:
    """The most conservative of the ranks' proposals (a plain function: the all-reduce computes the same)."""
    if not proposals:
        raise ValueError("no proposals to merge")
    return Agreed(micro=min(p.micro for p in proposals),
                  activation_checkpointing=any(p.activation_checkpointing for p in proposals),
                  retry=any(p.out_of_memory for p in proposals),
                  give_up=any(p.exhausted for p in proposals))


def _encode(proposal: Proposal) -> "list[int]":
    # One MAX all-reduce computes `merge`: the smallest micro-batch is the largest of the negated ones.
    return [-proposal.micro, int(proposal.activation_checkpointing), int(proposal.out_of_memory),
            int(proposal.exhausted)]


def _decode(values: "list[int]") -> Agreed:
    return Agreed(micro=-values[0], activation_checkpointing=bool(values[1]), retry=bool(values[2]),
                  give_up=bool(values[3]))


class RankAgreement:
    """The collective that makes the ranks of a process group agree; one all-reduce of four integers.

    Every rank must call `agree` the same number of times, at the same points: the runner does that
    (once per step, once more per failed attempt)."""

    def __init__(self, group: Optional[Any] = None, device: Optional[torch.device] = None) -> None:
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("RankAgreement needs torch.distributed.init_process_group(...) first")
        self.group = group
        # NCCL reduces only CUDA tensors; gloo and the others take CPU ones.
        if device is None:
            device = (torch.device("cuda", torch.cuda.current_device())
                      if dist.get_backend(group) == "nccl" else torch.device("cpu"))
        self.device = device
        self.rank = dist.get_rank(group)
        self.world_size = dist.get_world_size(group)

    def agree(self, proposal: Proposal) -> Agreed:
        values = torch.tensor(_encode(proposal), dtype=torch.int64, device=self.device)
        dist.all_reduce(values, op=dist.ReduceOp.MAX, group=self.group)
        return _decode(values.tolist())

    def average_gradients(self, model: torch.nn.Module) -> None:
        """What DDP's backward would have done, after the agreement: each gradient summed over the ranks
        and divided by their number, in place (no extra memory beyond the collective's own)."""
        for parameter in model.parameters():
            if parameter.requires_grad:
                if parameter.grad is None:
                    # Every rank must join every all-reduce: one without a gradient adds zeros.
                    parameter.grad = torch.zeros_like(parameter)
                dist.all_reduce(parameter.grad, op=dist.ReduceOp.SUM, group=self.group)
                parameter.grad.div_(self.world_size)


def rank_agreement(group: Optional[Any] = None) -> Optional[RankAgreement]:
    """An agreement over the process group when one of more than one rank is up; None otherwise."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size(group) > 1:
        return RankAgreement(group)
    return None


def proposal_of(controller: BatchController, out_of_memory: bool = False, exhausted: bool = False) -> Proposal:
    return Proposal(controller.geometry.micro, controller.activation_checkpointing, out_of_memory, exhausted)


def follow(controller: BatchController, agreed: Agreed, rank: int) -> BatchGeometry:
    """Make this rank's controller run what the ranks agreed, with a decision line when that is not what
    it proposed itself (another rank's quota or OOM decided)."""
    return controller.follow(controller.geometry.with_micro(agreed.micro), agreed.activation_checkpointing,
                             f"agreed by the ranks (rank {rank} follows the most conservative proposal)")
