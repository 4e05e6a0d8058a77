"""Security review K8, performed as another member of a group-writable project directory would: a
checkpoint planted there that runs code when loaded (no torch except where named)."""

import pickle
from pathlib import Path

import pytest

from gpu_mem_quota import RequeueCheckpoint


class RunsCode:
    """A pickle that, when loaded, creates `marker`: what a planted checkpoint would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return open, (str(self.marker), "w")


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
