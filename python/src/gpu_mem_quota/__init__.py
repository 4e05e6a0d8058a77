"""gpu-mem-quota for the training loop: fit the job's GPU-memory quota by adapting the batch live.

The core (this package's top level) is standard library only; `gpu_mem_quota.pytorch`,
`.lightning`, `.transformers` and `.deepspeed` adapt it to a framework.
"""

from .checkpoint import GeometryFile, RequeueCheckpoint
from .controller import BatchController, ControllerConfig, Decision, memory_budget, starting_geometry
from .geometry import BatchGeometry
from .model import MemoryModel, MicroStepMemory
from .node import (GpuStatus, NodeInfoError, Prediction, Quota, RestartHints, Status, StatusFileMissing,
                   StatusWatcher, read_quota, read_restart_hints, read_status, status_file_path)
from .telemetry import AllocatorSnapshot, TelemetryWriter

__all__ = [
    "AllocatorSnapshot", "BatchController", "BatchGeometry", "ControllerConfig", "Decision", "GeometryFile",
    "GpuStatus", "MemoryModel", "MicroStepMemory", "NodeInfoError", "Prediction", "Quota", "RequeueCheckpoint",
    "RestartHints", "Status", "StatusFileMissing", "StatusWatcher", "TelemetryWriter", "memory_budget",
    "read_quota", "read_restart_hints", "read_status", "starting_geometry", "status_file_path",
]
