"""Security review K8 for examples/train_loop.py, which cannot import the package (the end-to-end suite
and the benchmarks copy it alone into jobs): its own `replacing` must not write through a symlink
planted where the script used to write aside, as another user of a shared directory would plant it."""

import ast
import errno
import importlib.util
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_loop.py"

spec = importlib.util.spec_from_file_location("train_loop", EXAMPLE)
train_loop = importlib.util.module_from_spec(spec)
spec.loader.exec_module(train_loop)

VICTIM_TEXT = "the victim's own\n"


@pytest.fixture
def victim(tmp_path):
    victim = tmp_path / "victim" / ".bashrc"
    victim.parent.mkdir()
    victim.write_text(VICTIM_TEXT)
    return victim


def write_checkpoint(shared: Path, monkeypatch) -> Path:
    target = shared / "state.json"
    train_loop.save_checkpoint(str(target), {"step": 3, "micro": 2, "accum": 4})
    return target


def write_claim(shared: Path, monkeypatch) -> Path:
    """The fake GPU's claim file, as the loop writes it without --fake-nvml-lib (procs/ is mode 1777)."""
    monkeypatch.setenv("FAKE_NVML_DIR", str(shared.parents[1]))  # shared is <dir>/procs/0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    gpu = train_loop.FakeGpu()
    assert Path(gpu.path).parent == shared
    assert gpu.use(5 << 20)
    return Path(gpu.path)


# Where each write goes, and the fixed temporary name every version before K8 wrote through.
WRITERS = {
    "checkpoint": (lambda tmp_path: tmp_path / "ckpt", "state.json.tmp", write_checkpoint),
    "fake-GPU claim": (lambda tmp_path: tmp_path / "nvml" / "procs" / "0", f"{os.getpid()}.tmp", write_claim),
}


@pytest.mark.parametrize("writer", WRITERS, ids=list(WRITERS))
def test_a_symlink_planted_at_the_old_temporary_name_is_never_written_through(tmp_path, monkeypatch, victim,
                                                                              writer):
    directory, old_temporary, write = WRITERS[writer]
    shared = directory(tmp_path)
    shared.mkdir(parents=True)
    planted = shared / old_temporary
    planted.symlink_to(victim)

    target = write(shared, monkeypatch)

    assert victim.read_text() == VICTIM_TEXT
    assert planted.is_symlink() and target.read_text().strip()
    assert sorted(p.name for p in shared.iterdir()) == sorted([target.name, planted.name])  # no temporary left


def test_the_whole_script_checkpoints_beside_a_planted_symlink_and_resumes(tmp_path, victim):
    """The script as a job runs it, twice: its checkpoint directory holds a symlink at the old name."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "state.json.tmp").symlink_to(victim)

    def run(steps):
        return subprocess.run(
            [sys.executable, str(EXAMPLE), "--batch", "2x2", "--fixed", "1M", "--per-sample", "1M",
             "--steps", str(steps), "--step-seconds", "0", "--checkpoint-dir", str(ckpt)],
            cwd=tmp_path, capture_output=True, text=True, check=True,
            env={"PATH": "/usr/bin:/bin", "FAKE_NVML_DIR": str(tmp_path / "nvml"), "CUDA_VISIBLE_DEVICES": "0"}).stdout

    assert "done: 2 steps" in run(2)
    assert "resumed at step 2/3" in run(3)
    assert victim.read_text() == VICTIM_TEXT
    assert sorted(p.name for p in ckpt.iterdir()) == ["state.json", "state.json.tmp"]
    assert list((tmp_path / "nvml" / "procs" / "0").iterdir()) == []  # released, no temporary left


def test_a_symlink_planted_at_the_progress_file_is_refused_not_appended_through(tmp_path, victim):
    progress = tmp_path / "progress.jsonl"
    progress.symlink_to(victim)
    with pytest.raises(OSError) as refused:
        train_loop.Progress(str(progress))
    assert refused.value.errno == errno.ELOOP
    assert victim.read_text() == VICTIM_TEXT


def test_a_failed_write_keeps_the_old_checkpoint_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "state.json"
    target.write_text('{"step": 1}')
    with pytest.raises(TypeError):
        train_loop.save_checkpoint(str(target), {"step": 2, "seen": {1, 2}})  # not JSON: fails mid-write
    assert train_loop.load_checkpoint(str(target)) == {"step": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_the_checkpoint_gets_the_umask_permissions_as_an_ordinary_open(tmp_path):
    old = os.umask(0o027)
    try:
        train_loop.save_checkpoint(str(tmp_path / "state.json"), {"step": 1})
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "state.json").stat().st_mode) == 0o640


def test_the_script_stays_standard_library_only_and_never_unpickles():
    imported = set()
    for node in ast.walk(ast.parse(EXAMPLE.read_text())):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module.split(".")[0])
    assert imported <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)
    assert not imported & {"pickle", "shelve", "marshal", "dill"}
