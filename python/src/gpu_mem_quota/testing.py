"""A deterministic GPU stand-in for tests and benchmarks: a memory budget that raises the real
`torch.cuda.OutOfMemoryError`, on the CPU.

It counts what a GPU would hold for a training step: the parameters, their gradients and the
optimizer's state (the fixed part), plus every tensor autograd saves for the backward pass while the
graph holding it lives (the activations, seen through `torch.autograd.graph.saved_tensors_hooks`, each
storage once). Saving one that does not fit raises the OOM in the forward pass, as the CUDA
allocator would. Activation
checkpointing really lowers the count: a checkpointed block saves nothing through these hooks.

    budget = MemoryBudget(limit_bytes=24 << 20, model=model, optimizer=optimizer)
    with budget:
        runner = AdaptiveBatchRunner(model, optimizer, loss_of, controller, memory=budget)

It keeps what it held at most as a caching allocator does (`reserved`, until `release_cached`), which
is what NVML shows of a PyTorch process. On the dev cluster's fake GPUs, `claim_file` (see
`fake_gpu_claim_file`) makes that the process's GPU memory as the watchdog reads it.
"""

from __future__ import annotations

import os
import weakref
from pathlib import Path
from typing import Dict, Mapping, Optional, Tuple

import torch
from torch import nn

from ._files import replacing
from .telemetry import AllocatorSnapshot


def fake_gpu_claim_file(env: Mapping[str, str] = os.environ) -> Path:
    """This process's claim file on the dev cluster's fake GPUs (tests/fake-nvml/README.md):
    `$FAKE_NVML_DIR/procs/<first of CUDA_VISIBLE_DEVICES>/<pid>`, which the fake NVML reports as the
    process's used GPU memory."""
    root = Path(env.get("FAKE_NVML_DIR", "/var/lib/fake-nvml"))
    gpu = (env.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
    return root / "procs" / gpu / str(os.getpid())


class MemoryBudget:
    def __init__(self, limit_bytes: int, model: nn.Module, optimizer: torch.optim.Optimizer,
                 claim_file: Optional[Path] = None) -> None:
        self.limit_bytes = limit_bytes  # may be changed between steps: a neighbour came or left
        self.model, self.optimizer = model, optimizer
        self.claim_file = claim_file
        self._reserved = 0
        self.num_ooms = 0
        self._parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self._saved: Dict[int, Tuple["weakref.ref[torch.Tensor]", int]] = {}  # storage -> (tensor, bytes)
        self._peak = 0
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda tensor: tensor)

    def __enter__(self) -> "MemoryBudget":
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._hooks.__exit__(*exc)
        if self.claim_file is not None:
            self.claim_file.unlink(missing_ok=True)

    def fixed_bytes(self) -> int:
        """Parameters, gradients and optimizer state: what stays between micro-steps."""
        tensors = list(self.model.parameters())
        tensors += [p.grad for p in self.model.parameters() if p.grad is not None]
        tensors += [v for state in self.optimizer.state.values() for v in state.values()
                    if isinstance(v, torch.Tensor)]
        return sum(t.numel() * t.element_size() for t in tensors)

    def live_bytes(self) -> int:
        """Saved tensors whose graph still holds them (a backward pass, or dropping the graph, frees them)."""
        self._saved = {ptr: entry for ptr, entry in self._saved.items() if entry[0]() is not None}
        return sum(nbytes for _, nbytes in self._saved.values())

    def allocated(self) -> int:
        return self.fixed_bytes() + self.live_bytes()

    def begin_micro_step(self) -> int:
        self._peak = self.allocated()
        self._hold(self._peak)
        return self._peak

    def peak(self) -> Tuple[int, int]:
        """This micro-step's peak, allocated and reserved alike: the budget has no fragmentation, and the
        cache it keeps (`_reserved`) is reused before the device is asked for more."""
        return self._peak, self._peak

    def release_cached(self) -> None:
        """What the failed step saved is gone with its graph; the cache goes back to the device."""
        self._reserved = 0
        self._hold(self.allocated())

    def snapshot(self) -> AllocatorSnapshot:
        allocated = self.allocated()
        return AllocatorSnapshot(allocated, max(allocated, self._reserved), self._peak, self._reserved, 0,
                                 self.num_ooms)

    def _hold(self, nbytes: int) -> None:
        """The allocator keeps its largest hold (reserved) and shows that on the fake GPU."""
        if nbytes <= self._reserved:
            return
        self._reserved = nbytes
        if self.claim_file is not None:
            with replacing(self.claim_file) as f:  # the procs directory is everyone's (mode 1777)
                f.write(f"{nbytes}\n".encode())

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        ptr = storage.data_ptr()
        if ptr in self._parameters or ptr in self._saved:
            return tensor
        need = self.allocated() + storage.nbytes()
        if need > self.limit_bytes:
            self.num_ooms += 1
            raise torch.cuda.OutOfMemoryError(
                f"CUDA out of memory (test budget): tried to hold {need} bytes of {self.limit_bytes}")
        # The graph keeps a detached alias (same storage, same values, so the same gradients) and the
        # budget watches that alias. Kept as is, a tensor autograd saves from its own node's output
        # (an activation's result) points back at that node: a reference cycle, so after a failed
        # forward its storage outlived the graph until a garbage collection, and stayed counted.
        saved = tensor.detach()
        self._saved[ptr] = (weakref.ref(saved), storage.nbytes())
        self._peak = max(self._peak, need)
        self._hold(need)
        return saved
