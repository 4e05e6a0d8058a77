"""The Lightning and Hugging Face callbacks on the tiny model, where those frameworks are installed:
a step that runs out of memory leaves a smaller geometry behind, and the restart trains at it; a
Lightning run resumed mid-epoch at a smaller micro-batch keeps every step's batch exact."""

import pytest

torch = pytest.importorskip("torch")

from gpu_mem_quota import BatchController, BatchGeometry, ControllerConfig, GeometryFile  # noqa: E402
from gpu_mem_quota.testing import MemoryBudget  # noqa: E402

from tiny_model import batch, next_token_loss, setup  # noqa: E402

SEQ_LEN, SAMPLES = 32, 64
DECLARED = BatchGeometry(8, 2)


def controller_for(geometry_file):
    resumed = geometry_file.load()
    return BatchController(DECLARED, ControllerConfig(budget_bytes=None), start=resumed[0] if resumed else None,
                           log=lambda _: None)


def tokens():
    return batch(SAMPLES, SEQ_LEN, step=0)


def lightning_run(tmp_path, limit):
    pl = pytest.importorskip("lightning.pytorch")
    from gpu_mem_quota.lightning import QuotaBatchCallback, starting_values

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model, self.optimizer = setup()
            self.loss_of = next_token_loss(self.model)

        def training_step(self, tokens_batch, batch_idx):
            return self.loss_of(tokens_batch)

        def configure_optimizers(self):
            return self.optimizer

    geometry_file = GeometryFile(tmp_path / "geometry.json")
    controller = controller_for(geometry_file)
    values = starting_values(controller)
    module = Module()
    budget = MemoryBudget(limit, module.model, module.optimizer)
    callback = QuotaBatchCallback(controller, tmp_path / "last.ckpt", geometry_file, lambda step: SEQ_LEN, budget)
    trainer = pl.Trainer(accelerator="cpu", max_steps=3, accumulate_grad_batches=values["accumulate_grad_batches"],
                         callbacks=[callback], logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    loader = torch.utils.data.DataLoader(tokens(), batch_size=values["batch_size"])
    with budget:
        trainer.fit(module, loader)
    return trainer, geometry_file


def micro_peak(micro):
    model, optimizer = setup()
    budget = MemoryBudget(1 << 40, model, optimizer)
    with budget:
        budget.begin_micro_step()
        next_token_loss(model)(tokens()[:micro]).backward()
    return budget.peak()[0]


def test_lightning_oom_leaves_a_smaller_geometry_and_the_restart_uses_it(tmp_path):
    limit = (micro_peak(4) + micro_peak(8)) // 2 + (1 << 16)  # room for gradients: 4 fits, 8 does not
    with pytest.raises(torch.cuda.OutOfMemoryError):
        lightning_run(tmp_path, limit)
    assert GeometryFile(tmp_path / "geometry.json").load() == (BatchGeometry(4, 4), False)
    trainer, _ = lightning_run(tmp_path, limit)
    assert trainer.global_step == 3 and trainer.accumulate_grad_batches == 4


def test_hugging_face_oom_leaves_a_smaller_geometry_and_the_restart_uses_it(tmp_path):
    transformers = pytest.importorskip("transformers")
    from gpu_mem_quota.transformers import QuotaTrainerCallback, oom_guard, training_arguments

    class Wrapped(torch.nn.Module):
        """The Trainer's contract: forward(**batch) returns the loss first."""

        def __init__(self, model):
            super().__init__()
            self.model, self.loss_of = model, next_token_loss(model)

        def forward(self, input_ids):
            return (self.loss_of(input_ids),)

    limit = (micro_peak(4) + micro_peak(8)) // 2 + (1 << 16)

    def run():
        geometry_file = GeometryFile(tmp_path / "geometry.json")
        controller = controller_for(geometry_file)
        model, _ = setup()
        wrapped = Wrapped(model)
        args = transformers.TrainingArguments(
            output_dir=str(tmp_path / "out"), max_steps=3, use_cpu=True, report_to=[], save_strategy="no",
            logging_strategy="no", learning_rate=1e-2, **training_arguments(controller))
        optimizer = torch.optim.SGD(wrapped.parameters(), lr=1e-2)
        budget = MemoryBudget(limit, wrapped, optimizer)
        callback = QuotaTrainerCallback(controller, geometry_file, lambda step: SEQ_LEN, budget)
        trainer = transformers.Trainer(model=wrapped, args=args, train_dataset=[{"input_ids": t} for t in tokens()],
                                       callbacks=[callback], optimizers=(optimizer, None))
        with budget:
            oom_guard(callback, trainer.train, lambda: trainer.state.global_step)
        return trainer, geometry_file

    with pytest.raises(torch.cuda.OutOfMemoryError):
        run()
    assert GeometryFile(tmp_path / "geometry.json").load() == (BatchGeometry(4, 4), False)
    trainer, _ = run()
    assert trainer.state.global_step == 3 and trainer.args.per_device_train_batch_size == 4


def test_hugging_face_saves_the_geometry_in_the_checkpoint_directory(tmp_path):
    pytest.importorskip("transformers")
    from types import SimpleNamespace

    from gpu_mem_quota.transformers import QuotaTrainerCallback, saved_geometry

    geometry_file = GeometryFile(tmp_path / "geometry.json")
    controller = BatchController(DECLARED, ControllerConfig(budget_bytes=None), start=BatchGeometry(4, 4),
                                 log=lambda _: None)
    callback = QuotaTrainerCallback(controller, geometry_file, memory=object())
    assert saved_geometry(tmp_path / "out", geometry_file) is None  # a first run
    for step in (2, 10):  # the Trainer saved in checkpoint-2, later in checkpoint-10
        (tmp_path / "out" / f"checkpoint-{step}").mkdir(parents=True)
        callback.on_save(SimpleNamespace(output_dir=str(tmp_path / "out")),
                         SimpleNamespace(global_step=step, is_world_process_zero=True), None)
        controller.geometry = BatchGeometry(2, 8)
    assert saved_geometry(tmp_path / "out", geometry_file) == (BatchGeometry(2, 8), False)
    # An OOM after the last checkpoint left a smaller one in the geometry file: that one.
    geometry_file.save(BatchGeometry(1, 16), False)
    assert saved_geometry(tmp_path / "out", geometry_file) == (BatchGeometry(1, 16), False)


RESUME_SAMPLES, RESUME_STEPS, RESUME_DECLARED = 128, 10, BatchGeometry(8, 4)  # 4 steps an epoch


# Lightning takes only a loader with state_dict for resumable; StepBatchSampler and ResumeAtStep are what
# resumes this one, as the test shows.
@pytest.mark.filterwarnings("ignore:You're resuming from a checkpoint that ended before the epoch ended")
def test_lightning_resumes_mid_epoch_at_a_smaller_micro_batch_with_the_batch_exact(tmp_path):
    """The guide's promise across a restart: a predicted shrink after step 3 (of 4 an epoch) checkpoints
    and stops; the restart at 4x8 trains the same samples in every step, 32 each, as a run that never
    stopped, and ends where it ends."""
    pl = pytest.importorskip("lightning.pytorch")
    from gpu_mem_quota.lightning import QuotaBatchCallback, ResumeAtStep, saved_geometry, starting_values
    from gpu_mem_quota.resume import StepBatchSampler

    data = batch(RESUME_SAMPLES, 16, step=0)
    schedule = lambda step: 16 if step < 3 else 32  # noqa: E731 - the steps after the third are twice as long

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model, self.optimizer = setup()
            self.loss_of = next_token_loss(self.model)
            self.samples, self.in_step = [], 0

        def training_step(self, tokens_batch, batch_idx):
            self.in_step += len(tokens_batch)
            return self.loss_of(tokens_batch)

        def on_before_optimizer_step(self, optimizer):
            self.samples.append(self.in_step)
            self.in_step = 0

        def configure_optimizers(self):
            return self.optimizer

    # The capacity: micro-batch 8 fits the first steps and not the longer ones; 4 fits those.
    model, optimizer = setup()
    budget = MemoryBudget(1 << 40, model, optimizer)
    with budget:
        next_token_loss(model)(data[:1]).backward()
        baseline = budget.begin_micro_step()
        next_token_loss(model)(data[:8]).backward()
    per_sample = (budget.peak()[0] - baseline) / 8
    capacity = int(baseline + 12 * per_sample)

    def run(ckpt_path=None, steps_done=0):
        geometry_file = GeometryFile(tmp_path / "geometry.json")
        resumed = saved_geometry(tmp_path / "last.ckpt", geometry_file)
        controller = BatchController(RESUME_DECLARED, ControllerConfig(budget_bytes=capacity),
                                     start=resumed[0] if resumed else None, log=lambda _: None)
        values = starting_values(controller)
        module = Module()
        memory = MemoryBudget(1 << 40, module.model, module.optimizer)
        sampler = StepBatchSampler(RESUME_SAMPLES, values["batch_size"], RESUME_DECLARED.effective, steps_done, seed=5)
        callbacks = [QuotaBatchCallback(controller, tmp_path / "last.ckpt", geometry_file, schedule, memory),
                     ResumeAtStep(sampler)]
        trainer = pl.Trainer(accelerator="cpu", max_steps=RESUME_STEPS,
                             accumulate_grad_batches=values["accumulate_grad_batches"], callbacks=callbacks,
                             logger=False, enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False)
        with memory:
            trainer.fit(module, torch.utils.data.DataLoader(data, batch_sampler=sampler), ckpt_path=ckpt_path)
        return module, trainer

    first, trainer = run()
    assert trainer.global_step == 3 and first.samples == [32, 32, 32]
    # The planned shrink rides in the checkpoint, not in the geometry file.
    assert saved_geometry(tmp_path / "last.ckpt") == (BatchGeometry(4, 8), False)
    assert GeometryFile(tmp_path / "geometry.json").load() is None
    steps_done = torch.load(tmp_path / "last.ckpt", weights_only=True)["global_step"]
    second, trainer = run(tmp_path / "last.ckpt", steps_done)
    assert trainer.global_step == RESUME_STEPS and trainer.accumulate_grad_batches == 8
    assert second.samples == [32] * (RESUME_STEPS - 3)

    reference, optimizer = setup()
    order = StepBatchSampler(RESUME_SAMPLES, 32, 32, seed=5)
    loss_of = next_token_loss(reference)
    for step, indices in zip(range(RESUME_STEPS), (i for _ in range(3) for i in order)):
        loss_of(data[indices]).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    for ours, theirs in zip(second.model.parameters(), reference.parameters()):
        assert torch.allclose(ours, theirs, atol=1e-6), (ours - theirs).abs().max()
