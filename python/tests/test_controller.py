"""The controller against a memory that follows the model exactly (no torch): fixed + micro x k x seq."""

import logging

import pytest

from gpu_mem_quota import (BatchController, BatchGeometry, ControllerConfig, MicroStepMemory, Prediction,
                           RestartHints, memory_budget, starting_geometry)

GIB = 1 << 30
FIXED = 10 * GIB
PER_TOKEN = 4 << 20  # 4 MiB of activations per token of one sample


def peak(seq_len, micro):
    return FIXED + micro * PER_TOKEN * seq_len


def train(controller, seq_len, steps=1):
    """Run `steps` optimizer steps at `seq_len`, reporting each micro-step as an allocator would."""
    for _ in range(steps):
        geometry = controller.plan_step(seq_len)
        for _ in range(geometry.accum):
            controller.record_micro_step(MicroStepMemory(seq_len, geometry.micro, FIXED, peak(seq_len, geometry.micro),
                                                         peak(seq_len, geometry.micro)))
    return controller.geometry


def make(budget=40 * GIB, declared=BatchGeometry(8, 8), **config):
    lines = []
    controller = BatchController(declared, ControllerConfig(budget, **config), log=lines.append)
    return controller, lines


def test_geometry_keeps_the_effective_batch():
    geometry = BatchGeometry.parse("8x8")
    assert geometry.micro_batches() == [1, 2, 4, 8, 16, 32, 64]
    assert geometry.largest_micro_at_most(5) == BatchGeometry(4, 16)
    assert BatchGeometry.parse("7").largest_micro_at_most(6) == BatchGeometry(1, 7)
    assert geometry.next_smaller() == BatchGeometry(4, 16) and geometry.next_larger() == BatchGeometry(16, 4)
    with pytest.raises(ValueError, match="does not divide"):
        geometry.with_micro(3)
    with pytest.raises(ValueError, match="not a batch geometry"):
        BatchGeometry.parse("8x0")


def test_budget_is_the_quota_less_margin_and_context():
    assert memory_budget(40 * GIB) == int(40 * GIB * 0.95) - (512 << 20)
    assert memory_budget(40 * GIB, device_bytes=24 * GIB) == int(24 * GIB * 0.95) - (512 << 20)
    assert memory_budget(None) is None


def hints(**fields):
    base = dict(restarts=1, last_event="over-quota", last_peak_bytes=52 * GIB, batch_scale=0.73, geometry=None,
                activation_checkpointing=False)
    return RestartHints(**{**base, **fields})


def test_the_start_takes_the_smallest_of_declared_hints_and_checkpoint():
    declared = BatchGeometry(8, 8)
    assert starting_geometry(declared) == (declared, "declared")
    assert starting_geometry(declared, hints(geometry=BatchGeometry(4, 16))) == (BatchGeometry(4, 16), "restart hints")
    # docs/HINTS.md: scale 0.73 of 8 is 5.84; the largest divisor of 64 at most 5 is 4
    assert starting_geometry(declared, hints()) == (BatchGeometry(4, 16), "batch scale 0.73")
    assert starting_geometry(declared, hints(), resumed=BatchGeometry(2, 32)) == (BatchGeometry(2, 32), "checkpoint")
    # a checkpoint of another effective batch is someone else's
    assert starting_geometry(declared, None, resumed=BatchGeometry(1, 8))[0] == declared


def test_from_environment_reads_quota_and_hints():
    env = {"GPU_MEM_QUOTA_BYTES": str(40 * GIB), "GPU_MEM_QUOTA_RESTARTS": "1",
           "GPU_MEM_QUOTA_LAST_EVENT": "over-quota", "GPU_MEM_QUOTA_LAST_PEAK_BYTES": str(52 * GIB),
           "GPU_MEM_QUOTA_BATCH_SCALE": "0.56", "GPU_MEM_QUOTA_MICRO_BATCH": "4", "GPU_MEM_QUOTA_GRAD_ACCUM": "16"}
    lines = []
    controller = BatchController.from_environment(BatchGeometry(8, 8), env=env, log=lines.append, grow_after_steps=5)
    assert controller.geometry == BatchGeometry(4, 16)
    assert controller.config.budget_bytes == memory_budget(40 * GIB) and controller.config.grow_after_steps == 5
    assert lines == ["step 0 of this process: start 8x8 -> 4x16: from restart hints "
                     "(restart 1 after over-quota, last peak 52.00 GiB)"]


def test_without_a_log_callable_the_lines_go_to_the_module_logger(caplog):
    caplog.set_level(logging.INFO, logger="gpu_mem_quota")
    controller = BatchController.from_environment(BatchGeometry(8, 8), env={"GPU_MEM_QUOTA_BYTES": str(500 << 20)})
    controller.on_oom(1024)  # micro-batch 8, then on down: three retries, the last with nothing left
    while controller.on_oom(1024) is not None:
        pass
    records = [(r.name, r.levelname, r.getMessage().split(":")[0]) for r in caplog.records]
    assert records[0] == ("gpu_mem_quota.controller", "WARNING", "warning")  # a budget of 0 bytes
    assert records[1] == ("gpu_mem_quota.controller", "INFO", "step 0 of this process")  # start
    assert records[-1][:2] == ("gpu_mem_quota.controller", "WARNING")  # out of memory with nothing left
    assert "nothing left to shrink" in caplog.records[-1].getMessage()
    # A library configures no logging: what the application sets up decides what is printed.
    assert logging.getLogger("gpu_mem_quota").handlers == []


def test_it_shrinks_before_a_longer_sequence_would_cross_the_budget():
    controller, lines = make()
    assert train(controller, 512) == BatchGeometry(8, 8)  # 10G + 8 x 2G = 26G
    geometry = train(controller, 1024)  # 8 x 4G = 42G would be over
    assert geometry.effective == 64 and peak(1024, geometry.micro) <= 40 * GIB
    assert geometry == BatchGeometry(4, 16)  # the largest that fits: 10G + 4 x 4G = 26G
    assert len(lines) == 1
    assert lines[0].startswith("step 2 of this process: shrink 8x8 -> 4x16: predicted 42.00 GiB at seq 1024")


def test_with_several_lengths_seen_the_fit_is_exact():
    controller, _ = make()
    for seq_len in (256, 384, 512):
        train(controller, seq_len)
    a, b = controller.model.per_sample_line()
    assert a == pytest.approx(0, abs=1) and b == pytest.approx(PER_TOKEN)
    assert controller.model.predict(1536, 2) == peak(1536, 2)


def test_oom_without_data_halves():
    controller, lines = make(declared=BatchGeometry(12, 2))
    controller.plan_step(1024)
    assert controller.on_oom(1024) == BatchGeometry(6, 4)
    assert lines == ["step 1 of this process: oom-retry 12x2 -> 6x4: out of memory at seq 1024; "
                     "retrying the same batch"]


def test_oom_with_data_goes_to_what_fits_what_failed():
    controller, _ = make(budget=80 * GIB)
    train(controller, 1024)  # 10G + 8 x 4G = 42G: fits the 80G budget, so the device must be smaller
    controller.plan_step(2048)  # 10G + 8 x 8G = 74G predicted, still under the budget
    retry = controller.on_oom(2048)
    # The device refused 74G: trust at most 95 % of it, 70.3G, for which 4 (42G) is the largest that fits
    assert retry == BatchGeometry(4, 16) and controller.capacity_bytes == int(74 * GIB * 0.95)


def test_oom_at_micro_one_turns_checkpointing_on_then_gives_up():
    controller, lines = make(declared=BatchGeometry(2, 1))
    controller.plan_step(64)
    assert controller.on_oom(64) == BatchGeometry(1, 2)
    assert controller.on_oom(64) == BatchGeometry(1, 2) and controller.activation_checkpointing
    assert controller.on_oom(64) is None
    assert [line.split(":")[1].split()[0] for line in lines[:2]] == ["oom-retry", "checkpointing-on"]
    assert "nothing left to shrink" in lines[2]


def test_predicted_micro_one_overflow_turns_checkpointing_on():
    controller, lines = make(budget=20 * GIB, declared=BatchGeometry(4, 1))
    train(controller, 512)  # 10G + 4 x 2G = 18G
    train(controller, 4096)  # 10G + 1 x 16G = 26G even at micro-batch 1
    assert controller.geometry == BatchGeometry(1, 4) and controller.activation_checkpointing
    assert [line.split(": ")[1].split()[0] for line in lines] == ["shrink", "checkpointing-on"]


def test_it_grows_back_only_after_a_calm_stretch():
    controller, lines = make(grow_after_steps=3)
    train(controller, 512)
    train(controller, 1024)  # down to 4x16
    train(controller, 512, steps=2)
    train(controller, 1024)  # no headroom for 8 at 1024: the calm stretch starts over
    train(controller, 512, steps=2)
    assert controller.geometry == BatchGeometry(4, 16)
    train(controller, 512)  # the third calm step in a row
    assert controller.geometry == BatchGeometry(8, 8)
    assert lines[-1].startswith("step 8 of this process: grow 4x16 -> 8x8: 3 steps with headroom")
    train(controller, 256, steps=10)
    assert controller.geometry == BatchGeometry(8, 8)  # never above the declared micro-batch


def test_a_watchdog_warning_scales_the_per_step_memory():
    controller, lines = make()
    train(controller, 512)  # 10G fixed + 16G per step
    controller.on_watchdog_warning(Prediction(gpu_index=0, seconds_to_quota=240, suggested_batch_scale=0.6))
    assert controller.geometry == BatchGeometry(4, 16)  # 16G x 0.6 allows 9.6G: 4 x 2G
    assert "watchdog predicts the quota in 240 s" in lines[-1]
    controller.on_watchdog_warning(Prediction(gpu_index=0, seconds_to_quota=60, suggested_batch_scale=0.99))
    assert controller.geometry == BatchGeometry(2, 32)  # a warning always takes at least one notch


def test_the_effective_batch_never_changes():
    controller, _ = make(declared=BatchGeometry(6, 4), grow_after_steps=2)
    for seq_len in (128, 1024, 2048, 4096, 512, 512, 512, 128, 128, 128, 128):
        assert train(controller, seq_len).effective == 24
        if seq_len == 2048:
            controller.on_oom(seq_len)
    assert all(d.after.effective == 24 for d in controller.decisions)


def test_deepspeed_config_values_agree_with_the_geometry():
    from gpu_mem_quota.deepspeed import config_with_geometry  # no deepspeed needed: it only writes values

    controller, _ = make()
    controller.on_oom(1024)
    config = {"train_batch_size": 512, "zero_optimization": {"stage": 2}}
    updated = config_with_geometry(config, controller, world_size=8)
    assert updated == {"train_batch_size": 512, "train_micro_batch_size_per_gpu": 4,
                       "gradient_accumulation_steps": 16, "zero_optimization": {"stage": 2}}
    assert config == {"train_batch_size": 512, "zero_optimization": {"stage": 2}}  # a copy


def test_checkpointing_goes_off_first_when_headroom_returns():
    controller, lines = make(budget=20 * GIB, declared=BatchGeometry(4, 1), grow_after_steps=2)
    train(controller, 512)
    train(controller, 4096)  # micro-batch 1 and checkpointing
    train(controller, 512, steps=2)
    assert not controller.activation_checkpointing and controller.geometry == BatchGeometry(1, 4)
    train(controller, 512, steps=2)
    assert controller.geometry == BatchGeometry(2, 2)
    actions = [line.split(": ")[1].split()[0] for line in lines]
    assert actions == ["shrink", "checkpointing-on", "checkpointing-off", "grow"]
