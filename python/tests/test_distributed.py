"""One decision for all ranks, for real: 2 and 4 processes joined by torch.distributed (gloo, on the CPU),
a DDP-wrapped tiny model, a test budget that raises torch.cuda.OutOfMemoryError on one rank or on all,
against a reference trained in one process on the whole global batch with no limit."""

import datetime
import os
import time
import traceback
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

import torch.multiprocessing as mp  # noqa: E402

from gpu_mem_quota import BatchController, BatchGeometry, ControllerConfig  # noqa: E402
from gpu_mem_quota.distributed import Agreed, Proposal, RankAgreement, merge  # noqa: E402
from gpu_mem_quota.pytorch import AdaptiveBatchRunner  # noqa: E402
from gpu_mem_quota.testing import MemoryBudget  # noqa: E402

from tiny_model import batch, next_token_loss, setup  # noqa: E402

EFFECTIVE = 8  # per rank
UNLIMITED = 1 << 40
DEADLINE_S = 120  # a hang fails the test instead of blocking the suite


# --- the merge, as plain data ------------------------------------------------------------------------------

def test_the_most_conservative_proposal_wins():
    agreed = merge([Proposal(8, False), Proposal(2, False), Proposal(4, True)])
    assert agreed == Agreed(micro=2, activation_checkpointing=True, retry=False, give_up=False)


def test_one_rank_out_of_memory_means_every_rank_retries_and_one_exhausted_rank_ends_them_all():
    assert merge([Proposal(8, False), Proposal(4, False, out_of_memory=True)]).retry
    agreed = merge([Proposal(8, False), Proposal(1, True, out_of_memory=True, exhausted=True)])
    assert agreed.retry and agreed.give_up


def test_merging_nothing_is_an_error():
    with pytest.raises(ValueError, match="no proposals"):
        merge([])


def test_an_agreement_needs_a_process_group():
    if dist.is_initialized():
        pytest.skip("a process group is up in this process")
    with pytest.raises(RuntimeError, match="init_process_group"):
        RankAgreement()


# --- real ranks --------------------------------------------------------------------------------------------

def _rank_main(rank, world, rendezvous, out_dir, schedule, limits):
    """One rank: its slice of every global batch, under its own budget, through the agreeing runner."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=DEADLINE_S))
    result = {"steps": [], "decisions": [], "error": None}
    try:
        model, optimizer = setup()  # the same seed on every rank: the same start, as DDP checks
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        limit = limits[rank]
        budget = MemoryBudget(limit or UNLIMITED, model, optimizer)
        controller = BatchController(BatchGeometry(EFFECTIVE, 1), ControllerConfig(budget_bytes=limit),
                                     log=lambda line: result["decisions"].append(line))
        runner = AdaptiveBatchRunner(ddp, optimizer, next_token_loss(ddp), controller, memory=budget,
                                     agreement=RankAgreement())
        optimizer.register_step_post_hook(
            lambda *_: result["steps"].append((controller.geometry.micro, controller.geometry.accum,
                                               controller.activation_checkpointing)))
        with budget:
            for step, seq_len in enumerate(schedule):
                tokens = batch(EFFECTIVE * world, seq_len, step)[rank * EFFECTIVE:(rank + 1) * EFFECTIVE]
                runner.step([tokens], seq_len=seq_len)
    except Exception as error:  # noqa: BLE001 - reported to the test, which asserts on it
        result["error"] = f"{type(error).__name__}: {error}"
        result["traceback"] = traceback.format_exc()
    result["ooms"] = budget.num_ooms
    result["parameters"] = [p.detach().clone() for p in model.parameters()]
    leave(result, Path(out_dir) / f"rank{rank}.pt")


def leave(result, path):
    """Save this rank's result and end the rank once every rank has saved. The exit skips the
    interpreter's finalization, where gloo's threads may still free tensors and abort the process
    (pytorch/pytorch#179291): seen once in CI as SIGABRT after the results were written."""
    torch.save(result, path)
    dist.barrier()
    dist.destroy_process_group()
    os._exit(0)


def run_ranks(tmp_path, world, schedule, limits):
    """Start `world` ranks and wait for them all (a hang past DEADLINE_S fails); each rank's result."""
    out = tmp_path / "out"
    out.mkdir()
    context = mp.start_processes(_rank_main, args=(world, tmp_path / "rendezvous", str(out), schedule, limits),
                                 nprocs=world, join=False, start_method="spawn")
    deadline = time.monotonic() + DEADLINE_S
    try:
        while not context.join(timeout=1):
            assert time.monotonic() < deadline, f"the ranks did not end within {DEADLINE_S} s: a hang"
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
    return [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in range(world)]


def reference(world, schedule):
    """One process, the whole global batch at once, no limit: what data-parallel training must equal."""
    model, optimizer = setup()
    loss_of = next_token_loss(model)
    for step, seq_len in enumerate(schedule):
        loss_of(batch(EFFECTIVE * world, seq_len, step)).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return [p.detach() for p in model.parameters()]


def peak_at(micro, seq_len):
    """One rank's peak for a step at this micro-batch, measured in this process with no limit."""
    model, optimizer = setup()
    budget = MemoryBudget(UNLIMITED, model, optimizer)
    controller = BatchController(BatchGeometry(EFFECTIVE, 1).with_micro(micro), ControllerConfig(budget_bytes=None),
                                 log=lambda _: None)
    runner = AdaptiveBatchRunner(model, optimizer, next_token_loss(model), controller, memory=budget)
    with budget:
        runner.step([batch(EFFECTIVE, seq_len, 0)], seq_len=seq_len)
    return budget.peak()[0]


def assert_one_training(results, world, schedule):
    """Every rank took every step once, at the same geometry, the effective batch exact; and the
    parameters are the same on every rank and those of the one-process reference."""
    for rank, result in enumerate(results):
        assert result["error"] is None, f"rank {rank}: {result.get('traceback')}"
    steps = results[0]["steps"]
    assert len(steps) == len(schedule)
    assert all(r["steps"] == steps for r in results), [r["steps"] for r in results]
    assert all(micro * accum == EFFECTIVE for micro, accum, _ in steps)
    expected = reference(world, schedule)
    for rank, result in enumerate(results):
        for ours, theirs in zip(result["parameters"], expected):
            torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5, msg=lambda m: f"rank {rank}: {m}")


@pytest.mark.parametrize("world, short_rank", [(2, 1), (4, 2)])
def test_an_oom_on_one_rank_is_retried_on_every_rank_and_none_hangs(tmp_path, world, short_rank):
    schedule = [32] * 4
    limits = [None] * world
    limits[short_rank] = (peak_at(4, 32) + peak_at(8, 32)) // 2  # 8 samples do not fit there, 4 do
    results = run_ranks(tmp_path, world, schedule, limits)
    assert_one_training(results, world, schedule)
    assert results[short_rank]["ooms"] >= 1
    assert all(r["ooms"] == 0 for rank, r in enumerate(results) if rank != short_rank)
    assert results[0]["steps"][0][0] <= 4  # the first step was redone at the smaller micro-batch
    assert any(": oom-retry 8x1 -> " in line for line in results[short_rank]["decisions"])
    others = [r for rank, r in enumerate(results) if rank != short_rank]
    assert all(any(": agreed 8x1 -> " in line for line in r["decisions"]) for r in others)


def test_a_budget_on_every_rank_shrinks_them_all_to_the_smallest_prediction(tmp_path):
    world, schedule = 4, [16, 24, 32, 48, 64, 96]
    limits = [peak_at(8, 48), peak_at(8, 32), peak_at(8, 64), peak_at(4, 96)]
    results = run_ranks(tmp_path, world, schedule, limits)
    assert_one_training(results, world, schedule)
    steps = results[0]["steps"]
    assert steps[0][0] == 8 and steps[-1][0] < 8
    # Rank 1's budget is the tightest: it shrinks first, and the others follow it at the same step.
    assert any(": shrink 8x1 -> " in line for line in results[1]["decisions"])
    assert any(": agreed 8x1 -> " in line for line in results[0]["decisions"])


def test_a_rank_with_nothing_smaller_left_ends_every_rank_with_an_error_not_a_hang(tmp_path):
    world, schedule = 2, [32] * 2
    model, optimizer = setup()
    fixed = MemoryBudget(UNLIMITED, model, optimizer).fixed_bytes()
    limits = [None, fixed + 1024]  # not even micro-batch 1 with checkpointing fits on rank 1
    results = run_ranks(tmp_path, world, schedule, limits)
    assert results[1]["error"].startswith("OutOfMemoryError: CUDA out of memory (test budget)")
    assert results[0]["error"].startswith("OutOfMemoryError: rank 0: another rank ran out of memory")
    assert results[0]["steps"] == [] and results[1]["steps"] == []  # no optimizer step on either
    # Rank 1 turned checkpointing on before it gave up, and rank 0 followed it there.
    assert any("checkpointing-on" in line for line in results[1]["decisions"])
    assert any(": agreed " in line and "activation checkpointing" in line for line in results[0]["decisions"])


def test_ranks_without_any_budget_train_as_one(tmp_path):
    world, schedule = 2, [16, 32]
    results = run_ranks(tmp_path, world, schedule, [None, None])
    assert_one_training(results, world, schedule)
    assert all(r["decisions"] == [] for r in results)


# --- the restart-based adapters' agreement ------------------------------------------------------------------

def _observer_rank_main(rank, world, rendezvous, out_dir, limits):
    """One rank of a framework's loop as the restart-based adapters see it: a real micro-step measured
    by StepObserver, which plans the next step; then DeepSpeed's config for the restart."""
    from gpu_mem_quota import GeometryFile
    from gpu_mem_quota._restart import StepObserver
    from gpu_mem_quota.deepspeed import config_with_geometry

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=DEADLINE_S))
    model, optimizer = setup()
    budget = MemoryBudget(UNLIMITED, model, optimizer)
    controller = BatchController(BatchGeometry(EFFECTIVE, 1), ControllerConfig(budget_bytes=limits[rank]),
                                 log=lambda _: None)
    geometry_file = GeometryFile(Path(out_dir) / "geometry.json")  # one file for every rank
    observer = StepObserver(controller, budget, geometry_file, sequence_length=lambda step: 32)
    with budget:
        observer.begin()
        next_token_loss(model)(batch(EFFECTIVE, 32, rank)).backward()
        restart = observer.end(0)
    dist.barrier()
    config = config_with_geometry({"train_batch_size": 0}, controller, world, agreement=RankAgreement())
    leave({"restart": restart, "geometry": (controller.geometry.micro, controller.geometry.accum),
           "saved": geometry_file.load(), "config": config}, Path(out_dir) / f"rank{rank}.pt")


def test_the_restart_based_adapters_restart_every_rank_at_one_geometry(tmp_path):
    world = 2
    limits = [None, (peak_at(2, 32) + peak_at(4, 32)) // 2]  # rank 1 plans micro-batch 2, rank 0 keeps 8
    out = tmp_path / "out"
    out.mkdir()
    mp.start_processes(_observer_rank_main, args=(world, tmp_path / "rendezvous", str(out), limits),
                       nprocs=world, join=True, start_method="spawn")
    results = [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in range(world)]
    assert all(r["restart"] for r in results)  # rank 0 restarts too, though its own plan was unchanged
    assert all(r["geometry"] == (2, 4) for r in results), results
    assert all(r["saved"] is None for r in results)  # planned: it rides in the framework's checkpoint
    assert all(r["config"] == {"train_batch_size": EFFECTIVE * world, "train_micro_batch_size_per_gpu": 2,
                               "gradient_accumulation_steps": 4} for r in results)
