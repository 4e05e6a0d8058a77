"""examples/train_torch.py, as a user runs it: on the CPU against a simulated budget, then resumed."""

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_torch.py"


def run(tmp_path, steps):
    return subprocess.run(
        [sys.executable, str(EXAMPLE), "--batch", "8x1", "--steps", str(steps), "--width", "16",
         "--seq-from", "32", "--seq-to", "96", "--simulate-budget", "1M", "--checkpoint", str(tmp_path / "ckpt.pt")],
        cwd=tmp_path, capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"}).stderr


def test_the_example_adapts_finishes_and_resumes(tmp_path):
    first = run(tmp_path, 6)
    assert "shrink" in first or "oom-retry" in first
    assert "done: 6 steps" in first
    assert (tmp_path / "gpu-mem-quota-telemetry.local.0.json").exists()
    second = run(tmp_path, 8)
    assert "resumed at step 6/8" in second and "done: 8 steps" in second
