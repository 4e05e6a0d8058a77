"""A deterministic GPU stand-in for tests and benchmarks: a memory budget that raises the real
`torch.cuda.OutOfMemoryError`, on the CPU.

It counts what a GPU would hold for a training step: the parameters, their gradients and the
optimizer's state (the fixed part), plus every tensor autograd saves for the backward pass (the
activations, counted through `torch.autograd.graph.saved_tensors_hooks`, each storage once). Saving
one that does not fit raises the OOM in the forward pass, as the CUDA allocator would. Activation
checkpointing really lowers the count: a checkpointed block saves nothing through these hooks.

    budget = MemoryBudget(limit_bytes=24 << 20, model=model, optimizer=optimizer)
    with budget:
        runner = AdaptiveBatchRunner(model, optimizer, loss_of, controller, memory=budget)
"""

from __future__ import annotations

from typing import Set, Tuple

import torch
from torch import nn

from .telemetry import AllocatorSnapshot


class MemoryBudget:
    def __init__(self, limit_bytes: int, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.limit_bytes = limit_bytes  # may be changed between steps: a neighbour came or left
        self.model, self.optimizer = model, optimizer
        self.num_ooms = 0
        self._saved: Set[int] = set()
        self._fixed = self._live = self._peak = 0
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda tensor: tensor)

    def __enter__(self) -> "MemoryBudget":
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._hooks.__exit__(*exc)

    def fixed_bytes(self) -> int:
        """Parameters, gradients and optimizer state: what stays between micro-steps."""
        tensors = list(self.model.parameters())
        tensors += [p.grad for p in self.model.parameters() if p.grad is not None]
        tensors += [v for state in self.optimizer.state.values() for v in state.values()
                    if isinstance(v, torch.Tensor)]
        return sum(t.numel() * t.element_size() for t in tensors)

    def begin_micro_step(self) -> int:
        # The previous micro-step's backward pass freed its saved tensors.
        self._saved = {p.untyped_storage().data_ptr() for p in self.model.parameters()}
        self._fixed = self.fixed_bytes()
        self._live = 0
        self._peak = self._fixed
        return self._fixed

    def allocated(self) -> int:
        return self.fixed_bytes()

    def peak(self) -> Tuple[int, int]:
        return self._peak, self._peak

    def release_cached(self) -> None:
        self._saved.clear()
        self._live = 0

    def snapshot(self) -> AllocatorSnapshot:
        return AllocatorSnapshot(self._fixed, self._fixed, self._peak, self._peak, 0, self.num_ooms)

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() in self._saved:
            return tensor
        self._saved.add(storage.data_ptr())
        need = self._fixed + self._live + storage.nbytes()
        if need > self.limit_bytes:
            self.num_ooms += 1
            raise torch.cuda.OutOfMemoryError(
                f"CUDA out of memory (test budget): tried to hold {need} bytes of {self.limit_bytes}")
        self._live += storage.nbytes()
        self._peak = max(self._peak, self._fixed + self._live)
        return tensor
