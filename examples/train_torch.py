#!/usr/bin/env python3
"""A real PyTorch training loop under gpu-mem-quota, with the python/ package (pip install "./python[torch]").

A small language model built here (no downloads) trains on random tokens with a sequence-length
schedule (--seq-from -> --seq-to over the run), one effective batch per optimizer step. The package
keeps it inside the quota: it shrinks the micro-batch before a longer sequence would not fit, retries an
out-of-memory step at a smaller one, grows back, and checkpoints on SIGUSR1/SIGTERM so that a requeued
job resumes where it stopped, at the geometry it had.

On a GPU node it measures the CUDA allocator and takes its budget from GPU_MEM_QUOTA_BYTES. Without a
GPU, --simulate-budget SIZE trains on the CPU against gpu_mem_quota.testing.MemoryBudget, which raises
torch.cuda.OutOfMemoryError past SIZE as the device would:

    python3 examples/train_torch.py --batch 8x1 --steps 40 --simulate-budget 3M

On the dev cluster's fake GPUs, --fake-gpu also shows what the budget's allocator holds as the job's
GPU memory, so the watchdog measures it (tests/e2e/torch_job.rs).

Data-parallel: under `srun` with several tasks, --ddp INIT_METHOD (`tcp://HOST:PORT`, or `file://PATH`
on a file system every node sees) joins the tasks (rank SLURM_PROCID of SLURM_NTASKS) into a gloo
process group, wraps the model in DistributedDataParallel, trains each rank on its slice of the global
batch, and makes the ranks agree on one geometry per step (gpu_mem_quota.distributed); each rank keeps
its own checkpoint (PATH.rankN) and prints its parameters' checksum at the end (tests/e2e/nodes.rs).
"""

import argparse
import contextlib
import logging
import os
import time
from pathlib import Path

import torch
from torch import nn

from gpu_mem_quota import (BatchController, BatchGeometry, RequeueCheckpoint, StatusWatcher, TelemetryWriter,
                           status_file_path)
from gpu_mem_quota.distributed import RankAgreement
from gpu_mem_quota.pytorch import AdaptiveBatchRunner, Checkpointed, CudaMemory
from gpu_mem_quota.testing import MemoryBudget, fake_gpu_claim_file

VOCAB = 256

log = logging.getLogger("train_torch")


def configure_logging() -> None:
    """The package's lines and this script's, one per line on stderr as `gpu-mem-quota: ...` (the end-to-end
    tests read them): only these two loggers, not torch's."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("gpu-mem-quota: %(message)s"))
    for name in ("gpu_mem_quota", "train_torch"):
        logging.getLogger(name).addHandler(handler)
        logging.getLogger(name).setLevel(logging.INFO)


class SmallLM(nn.Module):
    """Embedding, a few MLP blocks (checkpointable) and a head: activations grow with batch x sequence."""

    def __init__(self, width: int, blocks: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width)
        self.blocks = nn.Sequential(*[
            Checkpointed(nn.Sequential(nn.LayerNorm(width), nn.Linear(width, 4 * width), nn.GELU(),
                                       nn.Linear(4 * width, width)))
            for _ in range(blocks)])
        self.head = nn.Linear(width, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.embed(tokens)))


def parse_size(text: str) -> int:
    """Slurm's sizes: 40G, 512M; a bare number is MiB."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    suffix = text[-1:].upper()
    number = text[:-1] if suffix in units else text
    if not number.isdigit():
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 40G, 512M)")
    return int(number) * units.get(suffix, 1 << 20)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=BatchGeometry.parse, default=BatchGeometry(8, 4),
                        help="declared MICROxACCUM, as --gpu-mem-batch (8x4)")
    parser.add_argument("--steps", type=int, default=100, help="optimizer steps (100)")
    parser.add_argument("--seq-from", type=int, default=64, help="tokens per sample at the start (64)")
    parser.add_argument("--seq-to", type=int, default=192, help="tokens per sample at the end (192)")
    parser.add_argument("--width", type=int, default=64, help="model width (64)")
    parser.add_argument("--blocks", type=int, default=2, help="model blocks (2)")
    parser.add_argument("--step-seconds", type=float, default=0.0,
                        help="each optimizer step takes at least this long: a stand-in for a larger model's "
                             "step time, for the dev cluster (0)")
    parser.add_argument("--simulate-budget", type=parse_size, default=None,
                        help="train on the CPU against a memory budget of this size instead of a GPU")
    parser.add_argument("--fake-gpu", action="store_true",
                        help="with --simulate-budget: hold what the budget's allocator reserves on the dev "
                             "cluster's fake GPU (its claim file under $FAKE_NVML_DIR), where the watchdog "
                             "measures it as NVML would a real process")
    parser.add_argument("--checkpoint", type=Path,
                        default=Path(os.environ.get("TRAIN_CHECKPOINT_DIR", ".")) / "train-torch.pt",
                        help="where progress survives a requeue ($TRAIN_CHECKPOINT_DIR/train-torch.pt)")
    parser.add_argument("--ddp", metavar="INIT_METHOD", default=None,
                        help="join the srun tasks into one data-parallel run (gloo): tcp://HOST:PORT or "
                             "file://PATH; rank and size from SLURM_PROCID and SLURM_NTASKS")
    args = parser.parse_args()
    configure_logging()

    device = torch.device("cpu" if args.simulate_budget else "cuda")
    rank, world = 0, 1
    if args.ddp:
        rank, world = int(os.environ.get("SLURM_PROCID", "0")), int(os.environ.get("SLURM_NTASKS", "1"))
        torch.distributed.init_process_group("gloo", init_method=args.ddp, rank=rank, world_size=world)
        torch.set_num_threads(1)  # a rank per core: more threads each only fight over the cores
        args.checkpoint = args.checkpoint.with_name(f"{args.checkpoint.name}.rank{rank}")
    torch.manual_seed(0)  # the same start on every rank
    model = SmallLM(args.width, args.blocks).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)

    # weights_only: the checkpoint holds tensors and plain values, so loading it runs no code.
    checkpoint = RequeueCheckpoint.for_torch(args.checkpoint).install()
    state = checkpoint.load()
    if state:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        log.info(f"resumed at step {state['step']}/{args.steps}")
    first_step = state["step"] if state else 0
    resumed = BatchGeometry(*state["geometry"]) if state else None

    if args.simulate_budget:
        memory = MemoryBudget(args.simulate_budget, model, optimizer,
                              claim_file=fake_gpu_claim_file() if args.fake_gpu else None)
        controller = BatchController.from_environment(args.batch, resumed=resumed,
                                                      device_bytes=args.simulate_budget, context_reserve_bytes=0)
    else:
        memory = CudaMemory(device)
        controller = BatchController.from_environment(args.batch, resumed=resumed,
                                                      device_bytes=memory.total_bytes())

    def loss_of(tokens: torch.Tensor) -> torch.Tensor:
        logits = model(tokens[:, :-1])
        return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))

    trained = model
    if args.ddp:
        trained = torch.nn.parallel.DistributedDataParallel(model)
        ddp_model = trained

        def loss_of(tokens: torch.Tensor) -> torch.Tensor:  # noqa: F811 - through the DDP wrapper
            logits = ddp_model(tokens[:, :-1])
            return nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tokens[:, 1:].reshape(-1))

    runner = AdaptiveBatchRunner(trained, optimizer, loss_of, controller, memory=memory,
                                 status=StatusWatcher(status_file_path()), telemetry=TelemetryWriter(),
                                 agreement=RankAgreement() if args.ddp else None)

    def progress(step: int) -> dict:
        return {"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "geometry": (controller.geometry.micro, controller.geometry.accum)}

    loss = float("nan")
    # The budget counts what autograd saves only inside its context; the CUDA allocator needs none.
    with memory if isinstance(memory, MemoryBudget) else contextlib.nullcontext():
        for step in range(first_step, args.steps):
            seq_len = args.seq_from + (args.seq_to - args.seq_from) * step // max(1, args.steps - 1)
            if args.ddp:  # this rank's slice of the step's global batch
                generator = torch.Generator().manual_seed(step)
                tokens = torch.randint(0, VOCAB, (args.batch.effective * world, seq_len + 1), generator=generator)
                tokens = tokens[rank * args.batch.effective:(rank + 1) * args.batch.effective].to(device)
            else:
                tokens = torch.randint(0, VOCAB, (args.batch.effective, seq_len + 1), device=device)
            started = time.monotonic()
            loss = runner.step([tokens], seq_len=seq_len)
            time.sleep(max(0.0, args.step_seconds - (time.monotonic() - started)))
            if checkpoint.at_step_boundary(lambda: progress(step + 1)):
                log.info(f"SIGTERM: saved at step {step + 1}; leaving for the requeue")
                return
    checkpoint.save(progress(args.steps))
    geometry = controller.geometry
    log.info(f"done: {args.steps} steps, last loss {loss:.3f}, at {geometry}"
             + (", activation checkpointing" if controller.activation_checkpointing else ""))
    if args.ddp:
        checksum = sum(float(p.detach().double().sum()) for p in model.parameters())
        log.info(f"rank {rank} of {world}: parameters checksum {checksum:.12e}")
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
