"""Allocator telemetry for the admin: what the job's own allocator says, in a file in the job's own space.

The watchdog measures a job through NVML and never believes the job. This file is the other view:
allocated vs reserved memory, fragmentation, the allocator's retries and OOMs, and the controller's
geometry. It is marked `"source": "job-reported"` so that nothing downstream (a status page, a
Prometheus textfile) mistakes it for a measurement; the job can write anything here.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping, Optional

from ._files import replacing
from .controller import BatchController

TELEMETRY_VERSION = 1


@dataclass(frozen=True)
class AllocatorSnapshot:
    allocated_bytes: int
    reserved_bytes: int
    peak_allocated_bytes: int
    peak_reserved_bytes: int
    num_alloc_retries: int  # the caching allocator freed its cache and retried a cudaMalloc
    num_ooms: int  # out-of-memory errors the allocator raised

    @property
    def fragmentation(self) -> float:
        """1 - allocated/reserved: the share of what the process holds that it cannot use right now."""
        return 1 - self.allocated_bytes / self.reserved_bytes if self.reserved_bytes else 0.0


def telemetry_path(env: Mapping[str, str] = os.environ) -> Path:
    """`GPU_MEM_QUOTA_TELEMETRY_FILE`, else one file per job and task in the working directory."""
    explicit = env.get("GPU_MEM_QUOTA_TELEMETRY_FILE")
    if explicit:
        return Path(explicit)
    job, task = env.get("SLURM_JOB_ID", "local"), env.get("SLURM_PROCID", "0")
    return Path.cwd() / f"gpu-mem-quota-telemetry.{job}.{task}.json"


class TelemetryWriter:
    def __init__(self, path: Optional[Path] = None, env: Mapping[str, str] = os.environ) -> None:
        self.path = path or telemetry_path(env)
        self._job_id = env.get("SLURM_JOB_ID")

    def write(self, snapshot: AllocatorSnapshot, controller: Optional[BatchController] = None) -> None:
        document = {
            "version": TELEMETRY_VERSION,
            "source": "job-reported",
            "job_id": int(self._job_id) if self._job_id and self._job_id.isdigit() else None,
            "pid": os.getpid(),
            "updated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "allocator": {**asdict(snapshot), "fragmentation": round(snapshot.fragmentation, 4)},
            "controller": None if controller is None else _controller_state(controller),
        }
        with replacing(self.path) as f:
            f.write(json.dumps(document, indent=2).encode() + b"\n")


def _controller_state(controller: BatchController) -> dict:
    last = controller.decisions[-1] if controller.decisions else None
    return {
        "micro_batch": controller.geometry.micro,
        "grad_accum": controller.geometry.accum,
        "effective_batch": controller.geometry.effective,
        "activation_checkpointing": controller.activation_checkpointing,
        "capacity_bytes": controller.capacity_bytes,
        "last_decision": None if last is None else last.line(),
    }
