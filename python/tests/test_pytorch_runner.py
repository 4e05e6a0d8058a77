"""The PyTorch runner for real: a tiny model on the CPU under a test budget that raises
torch.cuda.OutOfMemoryError, against a reference trained at the whole batch with no limit."""

import json

import pytest

torch = pytest.importorskip("torch")

from gpu_mem_quota import BatchController, BatchGeometry, ControllerConfig, StatusWatcher, TelemetryWriter  # noqa: E402
from gpu_mem_quota.pytorch import AdaptiveBatchRunner  # noqa: E402
from gpu_mem_quota.testing import MemoryBudget  # noqa: E402

from conftest import STATUS  # noqa: E402
from tiny_model import batch, next_token_loss, setup  # noqa: E402

EFFECTIVE = 8
UNLIMITED = 1 << 40


def trained(schedule, limit=UNLIMITED, declared=BatchGeometry(8, 1), status=None, telemetry=None, **config):
    """Train on `schedule` (a sequence length per optimizer step); the model, runner, budget and steps taken."""
    model, optimizer = setup()
    budget = MemoryBudget(limit, model, optimizer)
    controller = BatchController(declared, ControllerConfig(budget_bytes=limit, **config), log=lambda _: None)
    runner = AdaptiveBatchRunner(model, optimizer, next_token_loss(model), controller, memory=budget,
                                 status=status, telemetry=telemetry)
    steps = []
    optimizer.register_step_post_hook(lambda *_: steps.append(controller.geometry))
    with budget:
        for step, seq_len in enumerate(schedule):
            runner.step([batch(EFFECTIVE, seq_len, step)], seq_len=seq_len)
    return model, controller, budget, steps


def peak_at(micro, seq_len):
    """What one step at this micro-batch holds at its peak, measured with no limit."""
    _, _, budget, _ = trained([seq_len], declared=BatchGeometry(EFFECTIVE, 1).with_micro(micro))
    return budget.peak()[0]


def assert_same_parameters(model, reference):
    for ours, theirs in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)


def test_an_oom_is_retried_with_the_same_batch_and_no_step_is_lost():
    schedule = [32] * 4
    reference, *_ = trained(schedule)
    limit = (peak_at(4, 32) + peak_at(8, 32)) // 2  # 8 samples do not fit, 4 do
    model, controller, budget, steps = trained(schedule, limit)
    assert budget.num_ooms >= 1 and controller.decisions[0].action == "oom-retry"
    assert len(steps) == len(schedule)  # one optimizer step per batch, none lost, none repeated
    assert all(g.effective == EFFECTIVE for g in steps)
    assert_same_parameters(model, reference)  # the same training as at the whole batch at once


def test_a_longer_sequence_is_predicted_and_shrunk_for_without_an_oom():
    schedule = [16, 24, 32, 48, 64, 96]
    limit = peak_at(8, 48)  # 8 fits up to 48 tokens; then it must shrink
    reference, *_ = trained(schedule)
    model, controller, budget, steps = trained(schedule, limit)
    assert budget.num_ooms == 0
    assert [d.action for d in controller.decisions] and all(d.action == "shrink" for d in controller.decisions)
    assert steps[0].micro == 8 and steps[-1].micro < 8
    assert all(g.effective == EFFECTIVE for g in steps)
    assert_same_parameters(model, reference)


def test_it_grows_back_when_the_sequences_get_short_again():
    schedule = [64, 128] + [32] * 6
    limit = peak_at(4, 128)
    model, controller, budget, steps = trained(schedule, limit, grow_after_steps=2, grow_below=0.9)
    assert steps[1].micro <= 4
    assert steps[-1].micro > steps[1].micro and "grow" in [d.action for d in controller.decisions]
    assert budget.num_ooms <= 1  # at most the first long step, before anything was measured at 128
    reference, *_ = trained(schedule)
    assert_same_parameters(model, reference)


def test_checkpointing_comes_on_when_micro_batch_one_does_not_fit():
    limit = (peak_at(1, 64) + peak_at(1, 32)) // 2  # micro-batch 1 fits at 32 tokens, not at 64
    schedule = [32, 32, 64, 64]
    model, controller, budget, steps = trained(schedule, limit, declared=BatchGeometry(2, 4))
    assert controller.activation_checkpointing and len(steps) == len(schedule)
    assert model.blocks[0].enabled  # the Checkpointed blocks really recompute
    reference, *_ = trained(schedule, declared=BatchGeometry(2, 4))
    assert_same_parameters(model, reference)


def test_nothing_fits_the_oom_is_raised():
    with pytest.raises(torch.cuda.OutOfMemoryError):
        trained([32], limit=1000)


def test_a_watchdog_warning_in_the_status_file_shrinks_and_telemetry_shows_it(status_file, tmp_path):
    path = status_file(prediction={**STATUS["prediction"], "suggested_batch_scale": 0.5})
    telemetry = TelemetryWriter(tmp_path / "telemetry.json", env={})
    _, controller, _, steps = trained([32, 32, 32], status=StatusWatcher(path, lambda _: None), telemetry=telemetry)
    assert [d.action for d in controller.decisions] == ["watchdog-warning"]  # once per status write
    assert steps == [BatchGeometry(4, 2)] * 3  # the warning was there before the first step
    document = json.loads(telemetry.path.read_text())
    assert document["source"] == "job-reported" and document["controller"]["micro_batch"] == 4
    assert document["allocator"]["peak_allocated_bytes"] > 0


def test_the_reference_is_not_trivially_equal():
    """The parameter comparisons above mean something: another batch order gives other parameters."""
    model, *_ = trained([32, 32])
    other, *_ = trained([32, 48])
    assert any(not torch.allclose(a, b) for a, b in zip(model.parameters(), other.parameters()))
