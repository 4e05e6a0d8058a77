"""The benchmark's targets, on its simulated schedule (no torch): the controller loses no step and
restarts never, at no less than 90 % of the largest static micro-batch that fits."""

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parent.parent / "bench" / "seq_len_schedule.py"
spec = importlib.util.spec_from_file_location("seq_len_schedule", BENCH)
bench = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # dataclasses look their module up
spec.loader.exec_module(bench)


@pytest.mark.parametrize("schedule", bench.SCHEDULES, ids=lambda schedule: schedule.name)
@pytest.mark.parametrize("node", bench.NODES, ids=lambda node: node.name)
def test_the_controller_meets_the_targets(node, schedule):
    baseline, static_declared, halving, controller = bench.compare(node, schedule)
    assert (controller.lost_steps, controller.restarts, controller.ooms) == (0, 0, 0)
    assert controller.throughput() >= 0.9 * baseline.throughput()
    assert static_declared.restarts > 0  # the schedule does need adapting
    assert halving.ooms + halving.restarts > 0


def test_the_controller_grows_back_when_the_sequences_shorten_and_halving_does_not():
    back = bench.SCHEDULES[1]
    *_, halving, controller = bench.compare(bench.NODES[0], back)
    assert controller.final_micro > halving.final_micro


def test_the_real_torch_schedule_runs_on_the_cpu_budget(tmp_path):
    """python/bench/torch_schedule.py (slurm/gpu-check runs it on a GPU), shrunk to a smoke test on the
    CPU budget: the controller loses no step and never restarts; the declared static micro-batch does."""
    pytest.importorskip("torch")
    import json
    import subprocess

    script = Path(__file__).parent.parent / "bench" / "torch_schedule.py"
    out = subprocess.run([sys.executable, str(script), "--cpu", "--width", "32", "--blocks", "1", "--steps", "20",
                          "--seq-from", "16", "--seq-to", "48", "--json"],
                         check=True, capture_output=True, text=True, cwd=tmp_path).stdout
    baseline, static_declared, halving, controller = json.loads(out)["results"]
    assert (controller["lost_steps"], controller["restarts"]) == (0, 0)
    assert static_declared["restarts"] > 0
    assert halving["ooms"] > 0 and halving["restarts"] == 0
    assert baseline["ooms"] == 0


def test_the_guides_scenario_on_the_cpu_budget_has_no_oom_with_attention_quadratic(tmp_path):
    """The guide's scenario (--schedule guide --model decoder), shrunk for the CPU budget: the controller
    predicts the break at the declared micro-batch (memory in micro x seq²) and runs out of memory never;
    every optimizer step of every run trains on the whole effective batch."""
    pytest.importorskip("torch")
    import json
    import subprocess

    script = Path(__file__).parent.parent / "bench" / "torch_schedule.py"
    out = subprocess.run([sys.executable, str(script), "--cpu", "--schedule", "guide", "--model", "decoder",
                          "--seq-from", "16", "--seq-step", "4", "--break-at", "40", "--batch", "8x4",
                          "--steps", "10", "--width", "16", "--heads", "2", "--blocks", "1", "--vocab", "64",
                          "--json"], check=True, capture_output=True, text=True, cwd=tmp_path).stdout
    baseline, static_declared, halving, controller = json.loads(out)["results"]
    assert (controller["ooms"], controller["lost_steps"], controller["restarts"]) == (0, 0, 0)
    assert static_declared["fatal_ooms"] > 0 and static_declared["lost_steps"] > 0
    assert halving["ooms"] > 0 and halving["fatal_ooms"] == 0
    for run in (baseline, static_declared, halving, controller):
        assert run["min_step_samples"] == run["max_step_samples"] == 32
