"""The readers of what the node says: the quota, the restart hints, the status file (no torch)."""

import pytest

from gpu_mem_quota import (BatchGeometry, NodeInfoError, StatusFileMissing, StatusWatcher, read_quota,
                           read_restart_hints, read_status)
from conftest import STATUS

HINTS = {
    "GPU_MEM_QUOTA_RESTARTS": "1",
    "GPU_MEM_QUOTA_LAST_EVENT": "over-quota",
    "GPU_MEM_QUOTA_LAST_PEAK_BYTES": "55834574848",
    "GPU_MEM_QUOTA_BATCH_SCALE": "0.56",
    "GPU_MEM_QUOTA_MICRO_BATCH": "4",
    "GPU_MEM_QUOTA_GRAD_ACCUM": "16",
}


def test_quota_is_read_with_its_slurm_form():
    quota = read_quota({"GPU_MEM_QUOTA_BYTES": "42949672960", "GPU_MEM_QUOTA": "40G"})
    assert (quota.bytes, quota.text) == (42949672960, "40G")


def test_no_quota_is_none():
    assert read_quota({}) is None


@pytest.mark.parametrize("value", ["", "40G", "-1", "0", "1.5"])
def test_a_malformed_quota_names_the_variable_and_value(value):
    with pytest.raises(NodeInfoError, match=f"GPU_MEM_QUOTA_BYTES={value!r}"):
        read_quota({"GPU_MEM_QUOTA_BYTES": value})


def test_restart_hints_as_the_plugin_writes_them():
    hints = read_restart_hints(HINTS)
    assert hints.restarts == 1 and hints.last_event == "over-quota"
    assert hints.last_peak_bytes == 55834574848 and hints.batch_scale == 0.56
    assert hints.geometry == BatchGeometry(4, 16) and not hints.activation_checkpointing


def test_a_run_without_hints_has_none():
    assert read_restart_hints({"GPU_MEM_QUOTA_BYTES": "1024"}) is None


def test_hints_without_a_declared_geometry_and_with_checkpointing():
    env = {k: v for k, v in HINTS.items() if "MICRO" not in k and "ACCUM" not in k}
    hints = read_restart_hints({**env, "GPU_MEM_QUOTA_ACTIVATION_CHECKPOINTING": "1"})
    assert hints.geometry is None and hints.activation_checkpointing


@pytest.mark.parametrize("name, value, message", [
    ("GPU_MEM_QUOTA_LAST_EVENT", "oom", "GPU_MEM_QUOTA_LAST_EVENT='oom'"),
    ("GPU_MEM_QUOTA_BATCH_SCALE", "1.5", "GPU_MEM_QUOTA_BATCH_SCALE='1.5'"),
    ("GPU_MEM_QUOTA_BATCH_SCALE", "half", "GPU_MEM_QUOTA_BATCH_SCALE='half'"),
    ("GPU_MEM_QUOTA_MICRO_BATCH", "0", "GPU_MEM_QUOTA_MICRO_BATCH='0'"),
    ("GPU_MEM_QUOTA_ACTIVATION_CHECKPOINTING", "yes", "GPU_MEM_QUOTA_ACTIVATION_CHECKPOINTING='yes'"),
])
def test_malformed_hints_name_the_variable(name, value, message):
    with pytest.raises(NodeInfoError, match=message):
        read_restart_hints({**HINTS, name: value})


def test_half_a_geometry_is_an_error():
    env = dict(HINTS)
    del env["GPU_MEM_QUOTA_GRAD_ACCUM"]
    with pytest.raises(NodeInfoError, match="one is missing"):
        read_restart_hints(env)


def test_the_documented_status_file_is_read(status_file):
    status = read_status(status_file())
    assert status.job_id == 4242 and status.updated_at == "2025-06-01T12:00:00Z"
    (gpu,) = status.gpus
    assert (gpu.index, gpu.state, gpu.quota_bytes, gpu.hard_limit_bytes) == (0, "warn", 42949672960, None)
    assert status.prediction.seconds_to_quota == 240 and status.prediction.suggested_batch_scale == 0.62


def test_unknown_fields_are_ignored_and_a_hard_limit_is_read(status_file):
    gpus = [{**STATUS["gpus"][0], "hard_limit_bytes": 42949672960, "future_field": [1]}]
    status = read_status(status_file(gpus=gpus, prediction=None, added_later={"x": 1}))
    assert status.gpus[0].hard_limit_bytes == 42949672960 and status.prediction is None


def test_a_missing_status_file_says_so(tmp_path):
    with pytest.raises(StatusFileMissing, match="status.json: no status file"):
        read_status(tmp_path / "status.json")


@pytest.mark.parametrize("changes, message", [
    ({"version": 2}, "version 2"),
    ({"job_id": "4242"}, "job_id: '4242' is not a whole number"),
    ({"gpus": {}}, "gpus: {} is not an array"),
    ({"gpus": [{**STATUS["gpus"][0], "state": "fine"}]}, r"gpus\[0\].state: 'fine'"),
    ({"prediction": {"gpu_index": 0, "seconds_to_quota": 1, "suggested_batch_scale": 0}},
     "prediction.suggested_batch_scale: 0 is not a number in"),
])
def test_a_malformed_status_file_names_the_file_and_field(status_file, changes, message):
    path = status_file(**changes)
    with pytest.raises(NodeInfoError, match=message) as error:
        read_status(path)
    assert str(path) in str(error.value)


def test_half_written_json_is_an_error_naming_the_file(tmp_path):
    path = tmp_path / "status.json"
    path.write_text('{"version": 1, "gpus": [')
    with pytest.raises(NodeInfoError, match="status.json: not JSON"):
        read_status(path)


def test_the_watcher_hands_each_warning_over_once_and_ignores_broken_files(status_file, tmp_path):
    lines = []
    watcher = StatusWatcher(tmp_path / "status.json", lines.append)
    assert watcher.new_warning() is None  # not written yet: silent
    status_file()
    assert watcher.new_warning().suggested_batch_scale == 0.62
    assert watcher.new_warning() is None  # the same write
    status_file(updated_at="2025-06-01T12:00:02Z")
    assert watcher.new_warning() is not None
    (tmp_path / "status.json").write_text("{")
    assert watcher.new_warning() is None and watcher.new_warning() is None
    assert len(lines) == 1 and "ignoring the status file" in lines[0]


def test_without_a_log_callable_a_broken_file_is_a_warning_on_the_module_logger(tmp_path, caplog):
    (tmp_path / "status.json").write_text("{")
    assert StatusWatcher(tmp_path / "status.json").new_warning() is None
    assert [(r.name, r.levelname) for r in caplog.records] == [("gpu_mem_quota.node", "WARNING")]
    assert caplog.records[0].getMessage().startswith("ignoring the status file: ")


def test_a_gpu_over_its_quota_is_a_warning_to_shrink_now(status_file, tmp_path):
    over = {**STATUS["gpus"][0], "state": "over-quota", "used_bytes": 50 << 30, "quota_bytes": 40 << 30}
    status_file(gpus=[over], prediction=None)
    warning = StatusWatcher(tmp_path / "status.json", print).new_warning()
    assert (warning.seconds_to_quota, warning.suggested_batch_scale) == (0, 0.8)


def test_the_core_imports_no_framework():
    """The top-level package is standard library only: importing it with torch blocked must work."""
    import subprocess
    import sys
    code = ("import sys; sys.modules['torch'] = None; import gpu_mem_quota, gpu_mem_quota.controller;"
            " assert 'torch' not in [m.split('.')[0] for m in sys.modules if sys.modules[m] is not None]")
    subprocess.run([sys.executable, "-c", code], check=True)
