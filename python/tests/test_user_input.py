"""Nothing a user's input can crash: each input path fails soft with one message, or at the start with one
naming the variable; and the CPU test budget forgets a failed forward's tensors."""

import json

import pytest

from gpu_mem_quota import (BatchController, BatchGeometry, NodeInfoError, StatusWatcher, TelemetryWriter,
                           read_status)
from gpu_mem_quota.telemetry import AllocatorSnapshot

SNAPSHOT = AllocatorSnapshot(1, 2, 3, 4, 0, 0)


def test_telemetry_writer_takes_a_plain_string(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    writer = TelemetryWriter("x.json", env={})
    writer.write(SNAPSHOT)
    writer.write(SNAPSHOT)
    assert json.loads((tmp_path / "x.json").read_text())["allocator"]["reserved_bytes"] == 2


def test_telemetry_writer_refuses_what_is_not_a_path():
    with pytest.raises(TypeError, match=r"TelemetryWriter\(path\): 42 is not a file path"):
        TelemetryWriter(42)


def test_telemetry_file_in_a_missing_directory_is_an_error_at_start_naming_the_variable(tmp_path):
    env = {"GPU_MEM_QUOTA_TELEMETRY_FILE": str(tmp_path / "missing" / "t.json")}
    with pytest.raises(ValueError, match="^GPU_MEM_QUOTA_TELEMETRY_FILE=.*the directory .*missing.* does not exist"):
        TelemetryWriter(env=env)


def test_a_telemetry_write_that_fails_mid_run_is_reported_once_and_the_run_goes_on(tmp_path):
    directory = tmp_path / "gone"
    directory.mkdir()
    lines = []
    writer = TelemetryWriter(directory / "t.json", log=lines.append)
    directory.rmdir()
    for _ in range(3):
        writer.write(SNAPSHOT)
    assert len(lines) == 1 and "cannot write the telemetry file" in lines[0] and "carrying on" in lines[0]


@pytest.mark.parametrize("content, message", [
    (b'{"version": 1, "job_id": 1, "updated_at": "\xff\xfe"}', "not UTF-8"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b"\x00" * (2 << 20), "bytes; a status file is never over"),
])
def test_a_status_file_no_watchdog_writes_is_reported_once_and_ignored(tmp_path, content, message):
    path = tmp_path / "status.json"
    path.write_bytes(content)
    with pytest.raises(NodeInfoError, match=message):
        read_status(path)
    lines = []
    watcher = StatusWatcher(str(path), lines.append)  # a plain string, too
    assert [watcher.new_warning() for _ in range(3)] == [None, None, None]
    assert len(lines) == 1 and lines[0].startswith("ignoring the status file:") and message in lines[0]


def test_a_budget_that_rounds_to_zero_is_a_warning_at_start():
    lines = []
    BatchController.from_environment(BatchGeometry(8, 4), env={"GPU_MEM_QUOTA_BYTES": str(500 << 20)},
                                     log=lines.append)
    assert lines[0].startswith("warning: a budget of 0 bytes: 500.00 MiB less 5% is under the 512.00 MiB context")
    lines.clear()
    BatchController.from_environment(BatchGeometry(8, 4), env={"GPU_MEM_QUOTA_BYTES": str(4 << 30)},
                                     log=lines.append)
    assert not any("warning" in line for line in lines)


def test_cuda_memory_on_a_cpu_says_what_to_use_instead():
    torch = pytest.importorskip("torch")
    from gpu_mem_quota.pytorch import CudaMemory
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here")
    with pytest.raises(RuntimeError, match="no CUDA device here.*gpu_mem_quota.testing.MemoryBudget"):
        CudaMemory()


def test_the_test_budget_forgets_a_failed_forward_so_halving_survives_many_ooms():
    torch = pytest.importorskip("torch")
    import gc

    from gpu_mem_quota.testing import MemoryBudget
    from tiny_model import batch, next_token_loss, setup_decoder

    model, optimizer = setup_decoder()
    loss_of = next_token_loss(model)
    tokens = batch(16, 24, step=0)
    budget = MemoryBudget(1 << 40, model, optimizer)
    gc.disable()  # the leak was a reference cycle: no collector to hide it
    try:
        with budget:
            budget.begin_micro_step()
            loss_of(tokens[:2]).backward()
            one_pair = budget.peak()[0] - budget.fixed_bytes()
            optimizer.zero_grad(set_to_none=True)
            # Room for micro-batch 2 and not 4: every step at 16 fails (ooms) before the halving reaches 2.
            budget.limit_bytes = budget.allocated() + one_pair + (1 << 16) + 4 * sum(
                p.numel() * p.element_size() for p in model.parameters())
            failures = 0
            for step in range(10):
                micro = 16
                while True:
                    try:
                        for start in range(0, 16, micro):
                            (loss_of(tokens[start:start + micro]) * (micro / 16)).backward()
                        break
                    except torch.cuda.OutOfMemoryError:
                        failures += 1
                        optimizer.zero_grad(set_to_none=True)
                        budget.release_cached()
                        micro //= 2
                        assert micro >= 1, f"step {step}: a failed forward stayed counted"
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                assert budget.live_bytes() == 0
            assert failures >= 20  # 16 and 8 at least fail at each of the 10 steps
    finally:
        gc.enable()


def test_the_test_budget_does_not_change_gradients():
    torch = pytest.importorskip("torch")
    from gpu_mem_quota.testing import MemoryBudget
    from tiny_model import batch, next_token_loss, setup_decoder

    def gradients(under_budget):
        model, optimizer = setup_decoder()
        budget = MemoryBudget(1 << 40, model, optimizer)
        if under_budget:
            with budget:
                next_token_loss(model)(batch(4, 32, step=0)).backward()
        else:
            next_token_loss(model)(batch(4, 32, step=0)).backward()
        return [p.grad.clone() for p in model.parameters()]

    for with_budget, without in zip(gradients(True), gradients(False)):
        assert torch.equal(with_budget, without)


@pytest.mark.parametrize("content", [b"\xff\xfe", b"[" * 100_000 + b"]" * 100_000])
def test_a_broken_geometry_file_or_json_checkpoint_is_one_error_naming_it(tmp_path, content):
    from gpu_mem_quota import GeometryFile, RequeueCheckpoint

    path = tmp_path / "broken.json"
    path.write_bytes(content)
    with pytest.raises(ValueError, match="broken.json: not a geometry file"):
        GeometryFile(path).load()
    with pytest.raises(ValueError, match="broken.json: not a JSON checkpoint"):
        RequeueCheckpoint(path).load()
