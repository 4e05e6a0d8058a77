"""Requeue-safe checkpoints and the job-reported telemetry file (no torch)."""

import json
import os
import signal

import pytest

from gpu_mem_quota import (AllocatorSnapshot, BatchController, BatchGeometry, ControllerConfig, GeometryFile,
                           RequeueCheckpoint, TelemetryWriter)


@pytest.fixture
def restore_signals():
    saved = {s: signal.getsignal(s) for s in (signal.SIGUSR1, signal.SIGTERM)}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


def test_sigusr1_saves_at_the_next_boundary_and_the_loop_goes_on(tmp_path, restore_signals):
    checkpoint = RequeueCheckpoint(tmp_path / "ckpt" / "state.json").install()
    assert checkpoint.load() is None
    assert not checkpoint.at_step_boundary(lambda: {"step": 1})  # nothing came: nothing saved
    assert checkpoint.load() is None
    os.kill(os.getpid(), signal.SIGUSR1)
    assert not checkpoint.at_step_boundary(lambda: {"step": 2})
    assert checkpoint.load() == {"step": 2}


def test_sigterm_saves_and_says_stop_even_after_a_later_warning(tmp_path, restore_signals):
    checkpoint = RequeueCheckpoint(tmp_path / "state.json").install()
    os.kill(os.getpid(), signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGUSR1)
    assert checkpoint.at_step_boundary(lambda: {"step": 7})
    assert RequeueCheckpoint(tmp_path / "state.json").load() == {"step": 7}
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # no temporary file left


def test_the_geometry_file_round_trips_and_refuses_garbage(tmp_path):
    geometry_file = GeometryFile(tmp_path / "geometry.json")
    assert geometry_file.load() is None
    geometry_file.save(BatchGeometry(2, 32), True)
    assert geometry_file.load() == (BatchGeometry(2, 32), True)
    geometry_file.path.write_text('{"micro": 2}')
    with pytest.raises(ValueError, match="geometry.json: not a geometry file"):
        geometry_file.load()


def test_telemetry_is_marked_job_reported_with_the_controller_state(tmp_path):
    controller = BatchController(BatchGeometry(8, 8), ControllerConfig(budget_bytes=1 << 30), log=lambda _: None)
    controller.on_oom(1024)
    path = tmp_path / "telemetry.json"
    TelemetryWriter(path, env={"SLURM_JOB_ID": "12"}).write(
        AllocatorSnapshot(allocated_bytes=3 << 30, reserved_bytes=4 << 30, peak_allocated_bytes=5 << 30,
                          peak_reserved_bytes=6 << 30, num_alloc_retries=2, num_ooms=1), controller)
    document = json.loads(path.read_text())
    assert document["source"] == "job-reported" and document["job_id"] == 12
    assert document["allocator"]["fragmentation"] == 0.25 and document["allocator"]["num_ooms"] == 1
    assert document["controller"]["micro_batch"] == 4 and document["controller"]["effective_batch"] == 64
    assert document["controller"]["last_decision"].startswith("step 0 of this process: oom-retry 8x8 -> 4x16")


def test_the_default_telemetry_file_is_per_job_and_task(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    writer = TelemetryWriter(env={"SLURM_JOB_ID": "12", "SLURM_PROCID": "3"})
    assert writer.path == tmp_path / "gpu-mem-quota-telemetry.12.3.json"


def test_a_restart_starts_from_the_checkpoint_or_a_smaller_geometry_file():
    from gpu_mem_quota.checkpoint import restart_geometry

    ckpt, smaller, larger = (BatchGeometry(4, 4), False), (BatchGeometry(2, 8), False), (BatchGeometry(8, 2), False)
    assert restart_geometry(None, None) is None  # a first run
    assert restart_geometry(None, larger) == larger  # a checkpoint from before the geometry rode in it
    assert restart_geometry(ckpt, None) == ckpt
    assert restart_geometry(ckpt, smaller) == smaller  # an OOM after the checkpoint
    assert restart_geometry(ckpt, larger) == ckpt  # a file older than the checkpoint
    assert restart_geometry(ckpt, (BatchGeometry(4, 4), True)) == (BatchGeometry(4, 4), True)
    assert restart_geometry(ckpt, (BatchGeometry(1, 2), False)) == ckpt  # another effective batch
