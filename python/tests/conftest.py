"""Shared pieces: the node's files and, for the torch suites, a tiny language model built in code."""

import json
from pathlib import Path

import pytest

STATUS = {
    "version": 1,
    "job_id": 4242,
    "updated_at": "2025-06-01T12:00:00Z",
    "gpus": [{"index": 0, "uuid": "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6", "used_bytes": 36507222016,
              "peak_bytes": 38654705664, "quota_bytes": 42949672960, "state": "warn"}],
    "prediction": {"gpu_index": 0, "seconds_to_quota": 240, "suggested_batch_scale": 0.62},
}


@pytest.fixture
def status_file(tmp_path: Path):
    """Writes a status document (the example of docs/HINTS.md by default) and returns its path."""
    path = tmp_path / "status.json"

    def write(document=None, **changes):
        path.write_text(json.dumps({**(document or STATUS), **changes}))
        return path

    return write
