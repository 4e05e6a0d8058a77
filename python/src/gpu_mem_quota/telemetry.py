"""Allocator telemetry for the admin: what the job's own allocator says, in a file in the job's own space.

The watchdog measures a job through NVML and never believes the job. This file is the other view:
allocated vs reserved memory, fragmentation, the allocator's retries and OOMs, and the controller's
geometry. It is marked `"source": "job-reported"` so that nothing downstream (a status page, a
Prometheus textfile) mistakes it for a measurement; the job can write anything here.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Union

from ._files import replacing
from ._log import LogCallable, emit
from .controller import BatchController

TELEMETRY_VERSION = 1

logger = logging.getLogger(__name__)


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
    """`path` (a str or a Path) or `telemetry_path(env)`. A path whose directory does not exist is an error
    here, at the start, naming where it came from; a write that fails later (a full disk, a directory
    removed mid-run) is a warning, once (on this module's logger, or to `log`), and the run goes on:
    telemetry is for people."""

    def __init__(self, path: Optional[Union[str, Path]] = None, env: Mapping[str, str] = os.environ,
                 log: Optional[LogCallable] = None) -> None:
        if path is not None:
            origin = "TelemetryWriter(path)"
            if not isinstance(path, (str, os.PathLike)) or not str(path):
                raise TypeError(f"{origin}: {path!r} is not a file path (a str or a pathlib.Path)")
            self.path = Path(path)
        else:
            explicit = env.get("GPU_MEM_QUOTA_TELEMETRY_FILE")
            origin = "GPU_MEM_QUOTA_TELEMETRY_FILE" if explicit else "the working directory"
            self.path = telemetry_path(env)
        directory = self.path.parent
        if not directory.is_dir():
            raise ValueError(f"{origin}={str(self.path)!r}: the directory {str(directory)!r} does not exist")
        self._job_id = env.get("SLURM_JOB_ID")
        self._log = log
        self._last_error: Optional[str] = None

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
        try:
            with replacing(self.path) as f:
                f.write(json.dumps(document, indent=2).encode() + b"\n")
        except OSError as error:
            message = f"cannot write the telemetry file {self.path}: {error.strerror or error}"
            if message != self._last_error:
                self._last_error = message
                emit(logger, self._log, logging.WARNING, f"{message}; carrying on without it")


def _controller_state(controller: BatchController) -> Dict[str, Any]:
    last = controller.decisions[-1] if controller.decisions else None
    return {
        "micro_batch": controller.geometry.micro,
        "grad_accum": controller.geometry.accum,
        "effective_batch": controller.geometry.effective,
        "activation_checkpointing": controller.activation_checkpointing,
        "capacity_bytes": controller.capacity_bytes,
        "last_decision": None if last is None else last.line(),
    }
