"""Security review K8, performed as another member of a group-writable project directory would: a
symlink planted at the name the package used to write aside, and a checkpoint that runs code (no torch
except where named)."""

import json
import os
import pickle
import stat
from pathlib import Path

import pytest

from gpu_mem_quota import AllocatorSnapshot, BatchGeometry, GeometryFile, RequeueCheckpoint, TelemetryWriter
from gpu_mem_quota._files import replacing

SNAPSHOT = AllocatorSnapshot(1, 2, 3, 4, 0, 0)


def write_claim(path: Path) -> None:
    """The dev cluster's fake-GPU claim file, in a directory everyone can write (mode 1777)."""
    torch = pytest.importorskip("torch")
    from gpu_mem_quota.testing import MemoryBudget

    model = torch.nn.Linear(3, 2)
    MemoryBudget(1 << 20, model, torch.optim.SGD(model.parameters(), lr=0.1), claim_file=path).begin_micro_step()


# The file each writer writes, and the fixed temporary name every version before K8 wrote through.
WRITERS = {
    "checkpoint": ("state.json", ".state.json.tmp", lambda path: RequeueCheckpoint(path).save({"step": 1})),
    "geometry file": ("geometry.json", ".geometry.json.tmp",
                      lambda path: GeometryFile(path).save(BatchGeometry(2, 4), False)),
    "telemetry": ("gpu-mem-quota-telemetry.12.0.json", ".gpu-mem-quota-telemetry.12.0.json.tmp",
                  lambda path: TelemetryWriter(path).write(SNAPSHOT)),
    "fake-GPU claim": ("4242", "4242.tmp", write_claim),
}


class RunsCode:
    """A pickle that, when loaded, creates `marker`: what a planted checkpoint would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return open, (str(self.marker), "w")


@pytest.mark.parametrize("writer", WRITERS, ids=list(WRITERS))
def test_a_symlink_planted_at_the_old_temporary_name_is_never_written_through(tmp_path, writer):
    name, old_temporary, write = WRITERS[writer]
    victim = tmp_path / "victim" / ".bashrc"
    victim.parent.mkdir()
    victim.write_text("the victim's own\n")
    shared = tmp_path / "project"
    shared.mkdir()
    planted = shared / old_temporary
    planted.symlink_to(victim)

    write(shared / name)

    assert victim.read_text() == "the victim's own\n"
    assert planted.is_symlink() and json.loads((shared / name).read_text())
    assert sorted(p.name for p in shared.iterdir()) == sorted([name, planted.name])  # no temporary left


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "state.json"
    target.write_text("old\n")
    with pytest.raises(RuntimeError):
        with replacing(target) as f:
            f.write(b"half of the new")
            raise RuntimeError("killed mid-save")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_a_non_json_state_fails_at_save_and_keeps_the_previous_checkpoint(tmp_path):
    checkpoint = RequeueCheckpoint(tmp_path / "state.json")
    checkpoint.save({"step": 1})
    with pytest.raises(TypeError, match="for_torch"):
        checkpoint.save({"step": 2, "seen": {1, 2}})
    assert checkpoint.load() == {"step": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_the_new_file_gets_the_umask_permissions_not_mkstemps_0600(tmp_path):
    old = os.umask(0o027)
    try:
        with replacing(tmp_path / "state.json") as f:
            f.write(b"{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "state.json").stat().st_mode) == 0o640


def test_a_planted_pickle_checkpoint_is_refused_by_default_and_runs_nothing(tmp_path):
    marker = tmp_path / "code-ran"
    path = tmp_path / "ckpt" / "state.pt"
    path.parent.mkdir()
    path.write_bytes(pickle.dumps({"step": 9, "x": RunsCode(marker)}))

    with pytest.raises(ValueError, match="not a JSON checkpoint.*allow_pickle=True"):
        RequeueCheckpoint(path).load()
    assert not marker.exists()


def test_pickle_is_an_explicit_opt_in_and_then_loads_any_object(tmp_path):
    path = tmp_path / "state.pkl"
    RequeueCheckpoint(path, allow_pickle=True).save({"step": 3, "seen": {1, 2}})
    assert RequeueCheckpoint(path, allow_pickle=True).load() == {"step": 3, "seen": {1, 2}}
    # Which is why it is opt-in: the same load runs whatever a planted file holds.
    marker = tmp_path / "code-ran"
    path.write_bytes(pickle.dumps(RunsCode(marker)))
    RequeueCheckpoint(path, allow_pickle=True).load()
    assert marker.exists()
    with pytest.raises(TypeError):
        RequeueCheckpoint(path, pickle.dump, pickle.load, allow_pickle=True)


def test_the_torch_checkpoint_loads_weights_only_and_refuses_a_planted_pickle(tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "state.pt"
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    state = {"step": 4, "model": model.state_dict(), "optimizer": optimizer.state_dict(), "geometry": (2, 4)}
    RequeueCheckpoint.for_torch(path).save(state)
    loaded = RequeueCheckpoint.for_torch(path).load()
    assert loaded["step"] == 4 and loaded["geometry"] == (2, 4)
    torch.testing.assert_close(loaded["model"], model.state_dict())

    marker = tmp_path / "code-ran"
    torch.save({"step": 9, "x": RunsCode(marker)}, path)
    with pytest.raises(pickle.UnpicklingError):
        RequeueCheckpoint.for_torch(path).load()
    assert not marker.exists()
    RequeueCheckpoint.for_torch(path, allow_pickle=True).load()  # the opt-in: weights_only=False
    assert marker.exists()
