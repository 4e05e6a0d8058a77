"""StepBatchSampler: each optimizer step's samples fixed by the step, whatever the micro-batch, so that the
README's loop resumes where it stopped, never retraining, with the batch exact."""

from itertools import chain, repeat

import pytest

torch = pytest.importorskip("torch")

from gpu_mem_quota import BatchController, BatchGeometry, ControllerConfig  # noqa: E402
from gpu_mem_quota.pytorch import AdaptiveBatchRunner  # noqa: E402
from gpu_mem_quota.resume import StepBatchSampler  # noqa: E402

from tiny_model import batch, next_token_loss, setup  # noqa: E402


def steps(sampler, count, micro_per_step):
    """The first `count` steps' samples (each sorted), across epochs: each iter() is the next epoch."""
    out, it = [], chain.from_iterable(iter(sampler) for _ in repeat(None))
    for _ in range(count):
        out.append(sorted(i for _ in range(micro_per_step) for i in next(it)))
    return out


def test_a_resumed_sampler_yields_the_same_steps_at_any_micro_batch():
    whole = steps(StepBatchSampler(100, 32, 32, seed=1), 9, 1)  # 3 steps an epoch, 4 samples left out
    assert all(len(s) == 32 for s in whole) and whole[0] != whole[3]  # another order each epoch
    assert steps(StepBatchSampler(100, 4, 32, steps_done=4, seed=1), 5, 8) == whole[4:]
    assert steps(StepBatchSampler(100, 8, 32, steps_done=3, seed=1), 6, 4) == whole[3:]


def test_a_sampler_refuses_a_micro_batch_that_breaks_the_batch():
    with pytest.raises(ValueError, match="micro-batch 5 does not divide the effective batch 32"):
        StepBatchSampler(100, 5, 32)
    with pytest.raises(ValueError, match="10 samples make no effective batch of 32"):
        StepBatchSampler(10, 1, 32)


def test_the_readme_loop_resumes_at_another_geometry_as_if_it_never_stopped():
    data = batch(96, 16, step=0)  # 3 steps an epoch
    total = 8

    def train(start, steps_done, stop_at, state=None):
        model, optimizer = setup()
        if state:
            model.load_state_dict(state[0])
            optimizer.load_state_dict(state[1])
        controller = BatchController(BatchGeometry(8, 4), ControllerConfig(budget_bytes=None), start=start,
                                     log=lambda _: None)
        runner = AdaptiveBatchRunner(model, optimizer, next_token_loss(model), controller,
                                     memory=_Unlimited())
        loader = torch.utils.data.DataLoader(data, batch_sampler=StepBatchSampler(96, 32, 32, steps_done, seed=2))
        for step, tokens in zip(range(steps_done, stop_at), chain.from_iterable(repeat(loader))):
            runner.step([tokens], seq_len=16)
        return model, optimizer

    model, optimizer = train(None, 0, 4)
    state = (model.state_dict(), optimizer.state_dict())
    resumed, _ = train(BatchGeometry(2, 16), 4, total, state)
    reference, _ = train(None, 0, total)
    for ours, theirs in zip(resumed.parameters(), reference.parameters()):
        assert torch.allclose(ours, theirs, atol=1e-6), (ours - theirs).abs().max()


class _Unlimited:
    """No budget: the runner's memory source where memory is not under test."""

    def begin_micro_step(self):
        return 0

    def allocated(self):
        return 0

    def peak(self):
        return 0, 0

    def release_cached(self):
        pass

    def snapshot(self):
        from gpu_mem_quota import AllocatorSnapshot
        return AllocatorSnapshot(0, 0, 0, 0, 0, 0)
