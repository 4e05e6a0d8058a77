#!/usr/bin/env python3
"""A sequence-length schedule 512 -> 1536 (and one that comes back to 512) under a fixed 40G quota:
static micro-batches, Composer-style halving on OOM (no prediction, no growing back), and this
package's controller.

Simulated, standard library only: the training loop's memory follows fixed + micro x tokens x per-token,
with a few percent of seeded jitter per step (data-dependent activations), and time per micro-step is a
fixed overhead plus a cost per token, so larger micro-batches run faster. Two nodes:

  hard-limit     the driver holds the job to its quota: an allocation past it fails (CUDA OOM) at once;
  watchdog-only  an 80G GPU with no hard limit: the watchdog requeues a job that stays over its quota.

A crash or requeue restarts the job from its last checkpoint (every 50 steps) after a requeue delay,
with the plugin's restart hints (the largest micro-batch that fits what the failing step needed). Lost
steps are those redone after a restart. Throughput is relative to the largest static micro-batch that
fits the whole schedule.

    python3 python/bench/seq_len_schedule.py [--markdown]
"""

from __future__ import annotations

import argparse
import random
from dataclasses import dataclass
from typing import Callable, List, Optional

from gpu_mem_quota import BatchController, BatchGeometry, ControllerConfig, MicroStepMemory, memory_budget

GIB, MIB = 1 << 30, 1 << 20
QUOTA = 40 * GIB
DEVICE = 80 * GIB
CONTEXT = 512 * MIB  # CUDA context, outside the allocator: NVML sees it, the allocator does not
FIXED = 12 * GIB  # weights, gradients, optimizer state
PER_TOKEN = 3 * MIB  # activations per token of one sample
JITTER = 0.03  # a step's activations run up to 3 % above the mean
DECLARED = BatchGeometry(16, 4)  # effective batch 64
STEPS = 600
CHECKPOINT_EVERY = 50
REQUEUE_SECONDS = 120.0  # requeue, queue wait, start, model and checkpoint load
OOM_RETRY_SECONDS = 0.5  # freeing the cache and starting the batch again
MICRO_STEP_OVERHEAD = 0.010  # seconds per forward/backward pass, whatever its size
SECONDS_PER_TOKEN = 10e-6


def rising(step: int) -> int:
    """512 tokens, rising by 128 every 45 steps to 1536 at step 360, then held (the rises fall between
    checkpoints, as they would)."""
    return min(1536, 512 + 128 * (step // 45))


def rising_and_back(step: int) -> int:
    """The same rise, and back to 512 for the last 150 steps (a long-context phase inside a run)."""
    return rising(step) if step < 450 else 512


@dataclass(frozen=True)
class Schedule:
    name: str
    seq_len_at: Callable[[int], int]  # optimizer step -> tokens per sample

    def activations(self, step: int, micro: int) -> int:
        jitter = random.Random(step).uniform(0, JITTER)
        return int(micro * self.seq_len_at(step) * PER_TOKEN * (1 + jitter))

    def micro_step_seconds(self, step: int, micro: int) -> float:
        return MICRO_STEP_OVERHEAD + micro * self.seq_len_at(step) * SECONDS_PER_TOKEN


SCHEDULES = (Schedule("512 -> 1536", rising), Schedule("512 -> 1536 -> 512", rising_and_back))


@dataclass
class Result:
    name: str
    seconds: float = 0.0
    lost_steps: int = 0
    restarts: int = 0
    ooms: int = 0
    final_micro: int = 0

    def throughput(self) -> float:
        return STEPS * DECLARED.effective / self.seconds


@dataclass(frozen=True)
class Node:
    name: str
    allocator_limit: int  # what the allocator may hold before an allocation fails
    requeue_above: Optional[int]  # NVML-visible use the watchdog requeues for; None: the hard limit acts first


NODES = (Node("hard-limit", QUOTA - CONTEXT, None), Node("watchdog-only", DEVICE - CONTEXT, QUOTA))


def hinted_micro(schedule: Schedule, step: int) -> int:
    """The restart hints after a failure at `step`: the largest micro-batch that fits what it needed."""
    fits = [m for m in DECLARED.micro_batches() if m <= DECLARED.micro
            and FIXED + schedule.activations(step, m) + CONTEXT <= QUOTA * 0.95]
    return max(fits, default=1)


# A policy answers, before each step, the micro-batch to run it at; and, after an OOM, the one to retry
# at (None: the process dies). `observe` sees each successful step's measured peak.
@dataclass
class Policy:
    name: str
    plan: Callable[[int, int], int]  # (step, current micro) -> micro
    on_oom: Callable[[int, int], Optional[int]]  # (step, failed micro) -> retry micro or None
    observe: Callable[[int, int, int], None] = lambda step, micro, peak: None
    restart: Callable[[int], None] = lambda micro: None


def static(micro: int) -> Policy:
    return Policy(f"static {micro}", lambda step, current: current, lambda step, failed: None)


def composer_halving() -> Policy:
    def halve(step: int, failed: int) -> Optional[int]:
        return DECLARED.largest_micro_at_most(failed // 2).micro if failed > 1 else None
    return Policy("halving on OOM", lambda step, current: current, halve)


def controller_policy(schedule: Schedule) -> Policy:
    controller = BatchController(DECLARED, ControllerConfig(memory_budget(QUOTA, context_reserve_bytes=CONTEXT)),
                                 log=lambda line: None)

    def plan(step: int, current: int) -> int:
        return controller.plan_step(schedule.seq_len_at(step)).micro

    def on_oom(step: int, failed: int) -> Optional[int]:
        retry = controller.on_oom(schedule.seq_len_at(step))
        return retry.micro if retry else None

    def observe(step: int, micro: int, peak: int) -> None:
        controller.record_micro_step(MicroStepMemory(schedule.seq_len_at(step), micro, FIXED, peak, peak))

    def restart(micro: int) -> None:
        controller.geometry = DECLARED.with_micro(micro)

    return Policy("this controller", plan, on_oom, observe, restart)


def run(policy: Policy, node: Node, schedule: Schedule, start_micro: int) -> Result:
    result = Result(policy.name)
    micro, step, checkpointed = start_micro, 0, 0
    while step < STEPS:
        micro = policy.plan(step, micro)
        peak = FIXED + schedule.activations(step, micro)
        if peak > node.allocator_limit:
            result.ooms += 1
            result.seconds += schedule.micro_step_seconds(step, micro) + OOM_RETRY_SECONDS
            retry = policy.on_oom(step, micro)
            if retry is not None:
                micro = retry
                continue
        elif node.requeue_above is None or peak + CONTEXT <= node.requeue_above:
            result.seconds += DECLARED.effective // micro * schedule.micro_step_seconds(step, micro)
            policy.observe(step, micro, peak)
            step += 1
            if step % CHECKPOINT_EVERY == 0:
                checkpointed = step
            continue
        # The process died of its OOM, or the watchdog requeued it: back to the last checkpoint.
        result.restarts += 1
        result.lost_steps += step - checkpointed
        result.seconds += REQUEUE_SECONDS
        micro = hinted_micro(schedule, step)
        policy.restart(micro)
        step = checkpointed
    result.final_micro = micro
    return result


def largest_static_that_fits(node: Node, schedule: Schedule) -> int:
    return max(m for m in DECLARED.micro_batches() if m <= DECLARED.micro and all(
        FIXED + schedule.activations(s, m) <= node.allocator_limit
        and (node.requeue_above is None or FIXED + schedule.activations(s, m) + CONTEXT <= node.requeue_above)
        for s in range(STEPS)))


def compare(node: Node, schedule: Schedule) -> List[Result]:
    baseline_micro = largest_static_that_fits(node, schedule)
    largest_fitting = static(baseline_micro)
    largest_fitting.name += " (largest that fits)"
    return [run(largest_fitting, node, schedule, baseline_micro),
            run(static(DECLARED.micro), node, schedule, DECLARED.micro),
            run(composer_halving(), node, schedule, DECLARED.micro),
            run(controller_policy(schedule), node, schedule, DECLARED.micro)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    args = parser.parse_args()
    for schedule, node in ((schedule, node) for schedule in SCHEDULES for node in NODES):
        results = compare(node, schedule)
        baseline = results[0]
        rows = [(r.name, r.lost_steps, r.restarts, r.ooms, f"{r.seconds:.0f}",
                 f"{r.throughput() / baseline.throughput():.0%}", r.final_micro) for r in results]
        header = ("policy", "lost steps", "restarts", "OOMs", "seconds", "throughput", "last micro")
        print(f"\n{node.name}, seq {schedule.name}: {STEPS} steps, effective batch {DECLARED.effective},"
              f" quota {QUOTA // GIB}G")
        if args.markdown:
            print("\n| " + " | ".join(header) + " |\n|" + "---|" * len(header))
            for row in rows:
                print("| " + " | ".join(str(c) for c in row) + " |")
        else:
            print("  ".join(f"{h:>16}" for h in header))
            for row in rows:
                print("  ".join(f"{str(c):>16}" for c in row))


if __name__ == "__main__":
    main()
