"""The memory model's terms: a line in the sequence length unless the measurements support the S² term of
attention without a fused kernel, and then no OOM on the guide's schedule (scaled down for the CPU)."""

import random

import pytest

from gpu_mem_quota import MemoryModel, MicroStepMemory

MIB = 1 << 20


def fitted(per_sample, lengths, micro=4, fixed=100 * MIB):
    model = MemoryModel()
    for s in lengths:
        peak = fixed + int(micro * per_sample(s))
        model.observe(MicroStepMemory(s, micro, fixed, peak, peak))
    return model


def test_a_line_stays_a_line():
    model = fitted(lambda s: 1000 + 50 * s, [512 + 128 * i for i in range(10)])
    a, b, c = model.per_sample_curve()
    assert c == 0 and a == pytest.approx(1000) and b == pytest.approx(50)


def test_noise_on_a_line_does_not_buy_a_curve():
    rng = random.Random(7)
    model = fitted(lambda s: 1e6 + 4e3 * s + rng.uniform(-2e4, 2e4), [512 + 128 * (i % 10) for i in range(40)])
    assert model.per_sample_curve()[2] == 0


def test_attention_scores_are_fitted_as_seq_squared_and_predicted_beyond_what_was_seen():
    truth = lambda s: 2e5 + 3e3 * s + 8.0 * s * s  # noqa: E731
    model = fitted(truth, [512, 640, 768, 896, 1024, 1152])  # the schedule up to the length before the break
    a, b, c = model.per_sample_curve()
    assert c == pytest.approx(8.0, rel=1e-6)
    assert model.predict(1664, 8) == pytest.approx(100 * MIB + 8 * truth(1664), rel=1e-6)
    line_a, line_b = model.per_sample_line()
    assert 100 * MIB + 8 * (line_a + line_b * 1664) < 100 * MIB + 8 * truth(1664)  # what the line alone said


def test_three_lengths_are_too_few_to_tell_a_curve():
    assert fitted(lambda s: 8.0 * s * s, [512, 640, 768]).per_sample_curve()[2] == 0


def test_a_curve_bending_down_is_never_used():
    assert fitted(lambda s: 1e4 * s - 2.0 * s * s, [512 + 128 * i for i in range(8)]).per_sample_curve()[2] == 0


# --- on a decoder-only transformer, with the test budget ----------------------------------------------------

torch = pytest.importorskip("torch")

from gpu_mem_quota import BatchController, BatchGeometry, ControllerConfig  # noqa: E402
from gpu_mem_quota import model as model_module  # noqa: E402
from gpu_mem_quota.pytorch import AdaptiveBatchRunner  # noqa: E402
from gpu_mem_quota.testing import MemoryBudget  # noqa: E402

from tiny_model import batch, next_token_loss, setup_decoder  # noqa: E402

DECLARED = BatchGeometry(8, 4)
STEPS = 10  # the first cycle: lengths 32 .. 104, micro-batch 8 breaking from step 6 (0-based) on


def seq_len_at(step):
    """The guide's `512 + (step % 10) * 128`, divided by 16 for the CPU: 32 .. 104 tokens."""
    return 32 + (step % 10) * 8


def peak_at(micro, seq_len):
    model, optimizer = setup_decoder()
    budget = MemoryBudget(1 << 40, model, optimizer)
    with budget:
        next_token_loss(model)(batch(1, seq_len, 0)).backward()  # the gradients exist, as from micro-step 2 on
        optimizer.step()
        budget.begin_micro_step()
        next_token_loss(model)(batch(micro, seq_len, 0)).backward()
    return budget.peak()[0]


def train(limit, log):
    model, optimizer = setup_decoder()
    loss_of = next_token_loss(model)
    controller = BatchController(DECLARED, ControllerConfig(budget_bytes=limit), log=log)
    budget = MemoryBudget(limit, model, optimizer)
    with budget:
        runner = AdaptiveBatchRunner(model, optimizer, loss_of, controller, memory=budget)
        for step in range(STEPS):
            runner.step([batch(DECLARED.effective, seq_len_at(step), step)], seq_len=seq_len_at(step))
    return model, controller


def reference():
    model, optimizer = setup_decoder()
    loss_of = next_token_loss(model)
    for step in range(STEPS):
        loss_of(batch(DECLARED.effective, seq_len_at(step), step)).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return model


@pytest.fixture(scope="module")
def quota():
    """Micro-batch 8 fits at 72 tokens (1,152 in the guide) and breaks at 80 (1,280)."""
    fits, breaks = peak_at(8, seq_len_at(5)), peak_at(8, seq_len_at(6))
    assert breaks > fits
    return (fits + breaks) // 2


def test_the_quadratic_schedule_shrinks_by_prediction_with_no_oom(quota):
    lines = []
    model, controller = train(quota, lines.append)
    actions = [d.action for d in controller.decisions]
    assert "oom-retry" not in actions, lines
    assert controller.decisions[0].step == 7 and actions[0] == "shrink"  # before 80 tokens, the first time
    for ours, theirs in zip(model.parameters(), reference().parameters()):
        assert torch.allclose(ours, theirs, atol=1e-5), (ours - theirs).abs().max()


def test_the_line_alone_runs_out_of_memory_there(quota, monkeypatch):
    monkeypatch.setattr(model_module, "MIN_LENGTHS_FOR_CURVE", 10 ** 9)  # what the model did before
    _, controller = train(quota, lambda line: None)
    assert "oom-retry" in [d.action for d in controller.decisions]
