#!/usr/bin/env python3
"""The sequence-length schedule of seq_len_schedule.py with real PyTorch: a small language model trains
while its sequences grow from --seq-from to --seq-to tokens under a fixed quota. Compared: the largest
static micro-batch that fits the whole schedule (the baseline), the declared static micro-batch, halving
on OOM (Composer-style: no prediction, no growing back) and this package's controller.

On a CUDA device the caching allocator is held to the quota (torch.cuda.set_per_process_memory_fraction),
so an allocation past it raises the real torch.cuda.OutOfMemoryError, as a hard limit does. --cpu trains
on the CPU against gpu_mem_quota.testing.MemoryBudget instead (a smoke test: its times mean little).

The quota is set from the model, measured first: its fixed part (weights, gradients, AdamW's states) plus
--samples-at-start samples of --seq-from tokens, so that the declared micro-batch does not fit from the
start and the longest sequences need a smaller one still. A static run that runs out of memory dies and
restarts from its last checkpoint (every --checkpoint-every steps) at the micro-batch the restart hints
give, (T - fixed) / (P - fixed) of it with T = 95 % of the quota and P what it held when it failed, as
the watchdog computes them; the requeue's own delay is not counted. Lost steps are those redone.

--schedule guide is the guide's scenario: `seq = --seq-from + (step % 10) * --seq-step` (512 + (step % 10)
* 128 by default), with the quota set from the measured model so that the declared micro-batch fits at
the length before --break-at and not at --break-at (1,280 tokens), its hard limit the quota itself.
--model decoder trains a decoder-only transformer whose attention is written out (no fused kernel), so
that its memory grows with micro-batch x seq²; --model mlp grows only linearly. Each run reports its
OOMs in the process (retried in place) and fatal ones (the process died and restarted), lost steps,
the samples of every optimizer step (min and max: the effective batch held or not) and its throughput
relative to the largest static micro-batch that fits the whole schedule.

    python3 python/bench/torch_schedule.py            # a CUDA GPU (slurm/gpu-check runs it there)
    python3 python/bench/torch_schedule.py --cpu --width 32 --steps 12 --seq-from 16 --seq-to 48
    python3 python/bench/torch_schedule.py --cpu --schedule guide --model decoder --seq-from 128 \
        --seq-step 32 --break-at 320 --batch 8x4 --steps 30 --width 64 --heads 8 --vocab 256
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import time
from dataclasses import asdict, dataclass
from typing import Callable, List, Optional

import torch
from torch import nn

from gpu_mem_quota import BatchController, BatchGeometry, ControllerConfig, memory_budget
from gpu_mem_quota.pytorch import AdaptiveBatchRunner, CudaMemory, MemorySource
from gpu_mem_quota.testing import MemoryBudget

VOCAB = 4096
SAFETY_MARGIN = 0.05  # the hints' and the controller's target: 95 % of the quota


class SmallLM(nn.Module):
    """Embedding, MLP blocks and a head: activations grow with micro-batch x tokens."""

    def __init__(self, width: int, blocks: int, vocab: int = VOCAB) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.Sequential(*[
            nn.Sequential(nn.LayerNorm(width), nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
            for _ in range(blocks)])
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.embed(tokens)))


class Attention(nn.Module):
    """Causal self-attention written out, no fused kernel: the scores and their softmax (micro-batch x heads
    x seq x seq) are saved for the backward pass, as in the guide's memory model."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, w = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-1, -2)) / (w // self.heads) ** 0.5
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        weights = scores.masked_fill(mask, float("-inf")).softmax(-1)
        return self.out((weights @ v).transpose(1, 2).reshape(b, s, w))


class DecoderBlock(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attention = Attention(width, heads)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class DecoderLM(nn.Module):
    """A decoder-only transformer (pre-norm, learned positions): activations grow with micro-batch x seq²."""

    def __init__(self, width: int, blocks: int, heads: int, vocab: int, max_len: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.position = nn.Embedding(max_len, width)
        self.blocks = nn.Sequential(*[DecoderBlock(width, heads) for _ in range(blocks)])
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        return self.head(self.blocks(self.embed(tokens) + self.position(positions)))


@dataclass
class Result:
    name: str
    seconds: float = 0.0
    lost_steps: int = 0
    restarts: int = 0
    ooms: int = 0  # in the process, retried in place (halving, the controller) or fatal (the static runs)
    fatal_ooms: int = 0  # of those, the ones that ended the process: a restart from the checkpoint
    final_micro: int = 0
    samples: int = 0
    min_step_samples: int = 0  # the fewest and the most samples an optimizer step trained on
    max_step_samples: int = 0

    def throughput(self) -> float:
        return self.samples / self.seconds if self.seconds else 0.0


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.device = torch.device("cpu" if args.cpu else "cuda")
        self.declared = BatchGeometry.parse(args.batch)
        torch.manual_seed(0)
        self.vocab = args.vocab
        if args.model == "decoder":
            longest = max(self.seq_len_at(step) for step in range(args.steps)) + 1
            self.model: nn.Module = DecoderLM(args.width, args.blocks, args.heads, args.vocab, longest).to(self.device)
        else:
            self.model = SmallLM(args.width, args.blocks, args.vocab).to(self.device)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.initial = (copy.deepcopy(self.model.state_dict()), None)
        self.memory: MemorySource
        self.quota = 0
        self.pending_samples = 0  # backpropagated since the gradients were last dropped
        self.step_samples: List[int] = []  # what each optimizer step trained on

    def seq_len_at(self, step: int) -> int:
        """--schedule rising: --seq-from, rising in 8 equal rises over the first 80 % of the steps to
        --seq-to, then held. --schedule guide: --seq-from + (step % 10) * --seq-step."""
        a = self.args
        if a.schedule == "guide":
            return a.seq_from + (step % 10) * a.seq_step
        rises = 8
        rise_every = max(1, int(a.steps * 0.8) // rises)
        return min(a.seq_to, a.seq_from + (a.seq_to - a.seq_from) * (step // rise_every) // rises)

    def batch(self, step: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(step)
        tokens = torch.randint(0, self.vocab, (self.declared.effective, self.seq_len_at(step) + 1), generator=generator)
        return tokens.to(self.device)

    def loss_of(self, tokens: torch.Tensor) -> torch.Tensor:
        logits = self.model(tokens[:, :-1])
        self.pending_samples += tokens.shape[0]  # past the forward: an OOM there never counts
        return nn.functional.cross_entropy(logits.reshape(-1, self.vocab), tokens[:, 1:].reshape(-1))

    def reset(self) -> None:
        """The same start for every run: the initial weights, a fresh optimizer, an empty cache."""
        self.model.load_state_dict(self.initial[0])
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        # Every optimizer step records the samples backpropagated since the gradients were last
        # dropped (after a step, or after an OOM, by whichever loop runs): the effective batch as trained.
        self.step_samples = []
        self.optimizer.register_step_pre_hook(lambda *_: self.step_samples.append(self.pending_samples))
        zero_grad = self.optimizer.zero_grad

        def dropping(set_to_none: bool = True) -> None:
            self.pending_samples = 0
            zero_grad(set_to_none=set_to_none)

        self.optimizer.zero_grad = dropping  # type: ignore[method-assign]
        if isinstance(self.memory, MemoryBudget):
            self.memory.optimizer = self.optimizer
        self.free()

    def free(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        gc.collect()
        self.memory.release_cached()

    def calibrate(self) -> None:
        """Measure the fixed part and the activations per token on one step at micro-batch 1, then set
        the quota (and, on a GPU, cap the allocator at it)."""
        a = self.args
        if a.cpu:
            self.memory = MemoryBudget(1 << 62, self.model, self.optimizer)
            self.memory.__enter__()
        else:
            self.memory = CudaMemory(self.device)
        tokens = self.batch(0)[:1]
        self.loss_of(tokens).backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        fixed_states = self.memory.allocated()  # weights and AdamW's states
        baseline = self.memory.begin_micro_step()
        self.loss_of(tokens).backward()
        peak, _ = self.memory.peak()
        per_sample = max(1, peak - baseline)  # one sample's activations and its gradients
        fixed = fixed_states + (peak - baseline - per_sample) + self._grad_bytes()
        self.quota = int((fixed + a.samples_at_start * per_sample) / (1 - SAFETY_MARGIN))
        self.fixed, self.per_sample_at_start = fixed, per_sample
        if a.schedule == "guide":
            # The declared micro-batch fits at the length before --break-at, and not at --break-at.
            fits = self.step_peak(self.declared.micro, a.break_at - a.seq_step)
            breaks = self.step_peak(self.declared.micro, a.break_at)
            self.quota = (fits + breaks) // 2
        self.reset()
        if a.cpu:
            self.memory.limit_bytes = self.quota
        else:
            total = torch.cuda.get_device_properties(self.device).total_memory
            torch.cuda.set_per_process_memory_fraction(self.quota / total, self.device)

    def step_peak(self, micro: int, seq_len: int) -> int:
        """What an optimizer step at `micro` and `seq_len` holds at its peak, AdamW's states there."""
        self.reset()
        self.accumulate(self.batch(0)[:1], 1)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        generator = torch.Generator().manual_seed(0)
        tokens = torch.randint(0, self.vocab, (self.declared.effective, seq_len + 1), generator=generator)
        self.accumulate(tokens.to(self.device), micro)  # the last micro-step is the peak: the gradients exist
        peak = self.memory.peak()[0]
        self.free()
        return peak

    def _grad_bytes(self) -> int:
        return sum(p.numel() * p.element_size() for p in self.model.parameters())

    # --- the runs ----------------------------------------------------------------------------------------

    def accumulate(self, tokens: torch.Tensor, micro: int) -> None:
        size = tokens.shape[0]
        for start in range(0, size, micro):
            chunk = tokens[start:start + micro]
            self.memory.begin_micro_step()
            (self.loss_of(chunk) * (len(chunk) / size)).backward()

    def hinted(self, micro: int, held: int) -> int:
        """The restart hints' micro-batch after a failure holding `held` bytes (hints/restart.rs)."""
        target = self.quota * (1 - SAFETY_MARGIN)
        scale = (target - self.fixed) / max(1.0, held - self.fixed) if held > target else 1.0
        return self.declared.largest_micro_at_most(max(1, int(micro * min(1.0, scale)))).micro

    def run_static(self, name: str, micro: int, on_oom: Callable[[int], Optional[int]]) -> Result:
        """A fixed micro-batch; on an OOM `on_oom(micro)` gives the one to retry the same batch at, or None:
        the process dies and restarts from its checkpoint at the hinted micro-batch."""
        self.reset()
        result = Result(name)
        checkpoint = (copy.deepcopy(self.model.state_dict()), copy.deepcopy(self.optimizer.state_dict()), 0)
        step, started = 0, time.monotonic()
        while step < self.args.steps:
            tokens = self.batch(step)
            try:
                self.accumulate(tokens, micro)
                failed = None
            except torch.cuda.OutOfMemoryError:
                failed = self.memory.peak()[1]
            if failed is None:
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
                result.samples += tokens.shape[0]
                step += 1
                if step % self.args.checkpoint_every == 0:
                    checkpoint = (copy.deepcopy(self.model.state_dict()),
                                  copy.deepcopy(self.optimizer.state_dict()), step)
                continue
            result.ooms += 1
            self.free()
            retry = on_oom(micro)
            if retry is not None:
                micro = retry
                continue
            result.fatal_ooms += 1
            # Died: a restart from the checkpoint, with the hints (never the same micro-batch again:
            # the hints step down at least once after a failure at the limit).
            if micro == 1:
                raise SystemExit(f"{name}: micro-batch 1 does not fit the quota; raise --samples-at-start")
            result.restarts += 1
            result.lost_steps += step - checkpoint[2]
            self.model.load_state_dict(checkpoint[0])
            self.optimizer.load_state_dict(checkpoint[1])
            step = checkpoint[2]
            micro = min(self.hinted(micro, failed), self.declared.largest_micro_at_most(micro - 1).micro)
        result.seconds = time.monotonic() - started
        result.final_micro = micro
        return self.with_step_samples(result)

    def with_step_samples(self, result: Result) -> Result:
        result.min_step_samples, result.max_step_samples = min(self.step_samples), max(self.step_samples)
        return result

    def run_controller(self) -> Result:
        self.reset()
        controller = BatchController(self.declared, ControllerConfig(
            memory_budget(self.quota, margin=SAFETY_MARGIN, context_reserve_bytes=0)), log=lambda line: None)
        runner = AdaptiveBatchRunner(self.model, self.optimizer, self.loss_of, controller, memory=self.memory)
        result = Result("this controller")
        started = time.monotonic()
        for step in range(self.args.steps):
            tokens = self.batch(step)
            runner.step([tokens], seq_len=self.seq_len_at(step))
            result.samples += tokens.shape[0]
        result.seconds = time.monotonic() - started
        result.ooms = sum(1 for d in controller.decisions if d.reason.startswith("out of memory"))
        result.final_micro = controller.geometry.micro
        return self.with_step_samples(result)

    def largest_static_that_fits(self) -> int:
        """The largest micro-batch whose step at the longest sequences runs within the quota."""
        longest = max(range(self.args.steps), key=self.seq_len_at)
        for micro in sorted((m for m in self.declared.micro_batches() if m <= self.declared.micro), reverse=True):
            self.reset()
            # One step first, so that AdamW's states exist, as they do from the second step on.
            self.accumulate(self.batch(0)[:1], 1)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            try:
                self.accumulate(self.batch(longest), micro)
                self.optimizer.step()
                self.free()
                return micro
            except torch.cuda.OutOfMemoryError:
                self.free()
        return 1

    def compare(self) -> List[Result]:
        def dies(micro: int) -> Optional[int]:
            return None

        def halves(micro: int) -> Optional[int]:
            return self.declared.largest_micro_at_most(micro // 2).micro if micro > 1 else None

        baseline_micro = self.largest_static_that_fits()
        # Once untimed: the first run of a process pays for warming up (allocator, thread pools, caches).
        self.run_static("warm-up", baseline_micro, dies)
        return [self.run_static(f"static {baseline_micro} (largest that fits)", baseline_micro, dies),
                self.run_static(f"static {self.declared.micro} (declared)", self.declared.micro, dies),
                self.run_static("halving on OOM", self.declared.micro, halves),
                self.run_controller()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", action="store_true", help="the CPU and a test budget instead of a CUDA GPU")
    parser.add_argument("--batch", default="16x4", help="declared MICROxACCUM (16x4)")
    parser.add_argument("--steps", type=int, default=60, help="optimizer steps (60)")
    parser.add_argument("--seq-from", type=int, default=512, help="tokens per sample at the start (512)")
    parser.add_argument("--seq-to", type=int, default=1536, help="tokens per sample from 80 %% of the run on (1536)")
    parser.add_argument("--schedule", choices=("rising", "guide"), default="rising",
                        help="rising: --seq-from to --seq-to in 8 rises; guide: --seq-from + (step %% 10) * --seq-step")
    parser.add_argument("--seq-step", type=int, default=128, help="--schedule guide's rise per step (128)")
    parser.add_argument("--break-at", type=int, default=1280,
                        help="--schedule guide: the length the declared micro-batch first does not fit at (1280)")
    parser.add_argument("--model", choices=("mlp", "decoder"), default="mlp",
                        help="mlp: memory linear in seq; decoder: attention written out, memory in micro x seq² (mlp)")
    parser.add_argument("--width", type=int, default=1024, help="model width (1024)")
    parser.add_argument("--blocks", type=int, default=8, help="model blocks (8)")
    parser.add_argument("--heads", type=int, default=8, help="attention heads of --model decoder (8)")
    parser.add_argument("--vocab", type=int, default=VOCAB, help=f"vocabulary ({VOCAB})")
    parser.add_argument("--samples-at-start", type=float, default=10.0,
                        help="samples of --seq-from tokens the quota holds beside the fixed part (10)")
    parser.add_argument("--checkpoint-every", type=int, default=10, help="a static run's checkpoints (10)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    if not args.cpu and not torch.cuda.is_available():
        parser.error("no CUDA device: run on a GPU, or pass --cpu for the smoke test")
    bench = Bench(args)
    bench.calibrate()
    results = bench.compare()
    baseline = results[0]
    if args.json:
        print(json.dumps({"device": torch.cuda.get_device_name(bench.device) if not args.cpu else "cpu",
                          "quota_bytes": bench.quota, "fixed_bytes": bench.fixed,
                          "results": [{**asdict(r), "relative_throughput": r.throughput() / baseline.throughput()}
                                      for r in results]}, indent=2))
        return
    where = "CPU (test budget)" if args.cpu else torch.cuda.get_device_name(bench.device)
    lengths = (f"{args.seq_from} + (step % 10) * {args.seq_step} tokens, declared breaking at {args.break_at}"
               if args.schedule == "guide" else f"{args.seq_from} -> {args.seq_to} tokens")
    print(f"{where}, {args.model}: quota {bench.quota / (1 << 20):.1f} MiB (fixed {bench.fixed / (1 << 20):.1f} MiB), "
          f"{args.steps} steps, {lengths}, declared {args.batch}")
    print(f"{'run':<34} {'lost steps':>10} {'restarts':>8} {'OOMs':>5} {'fatal':>5} {'samples/step':>12} "
          f"{'seconds':>8} {'throughput':>10} {'final':>5}")
    for r in results:
        per_step = f"{r.min_step_samples}-{r.max_step_samples}" if r.min_step_samples != r.max_step_samples \
            else str(r.min_step_samples)
        print(f"{r.name:<34} {r.lost_steps:>10} {r.restarts:>8} {r.ooms:>5} {r.fatal_ooms:>5} {per_step:>12} "
              f"{r.seconds:>8.1f} {r.throughput() / baseline.throughput():>10.0%} {r.final_micro:>5}")


if __name__ == "__main__":
    main()
