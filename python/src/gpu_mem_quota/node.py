"""What the node tells the job: its quota, the restart hints and the watchdog's status file (docs/HINTS.md).

Everything here is advice for the training loop. The quota is enforced by the watchdog from slurmctld's
and the kernel's facts, never from these values, so a loop that misreads them hurts only itself; they
are still checked strictly, and an error names the variable or the file and the value it found.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, List, Mapping, Optional, Tuple, Union

from ._log import LogCallable, emit
from .geometry import BatchGeometry

logger = logging.getLogger(__name__)

LAST_EVENTS = ("over-quota", "preempted", "near-oom")
GPU_STATES = ("ok", "warn", "over-quota")
STATUS_VERSION = 1
# The watchdog writes a few KiB for a node of GPUs; anything far larger is not its file.
MAX_STATUS_BYTES = 1 << 20


class NodeInfoError(ValueError):
    """A variable or the status file holds something the plugin or the watchdog never writes."""


class StatusFileMissing(NodeInfoError, FileNotFoundError):
    """The status file does not exist (yet: the watchdog writes it after its first sample)."""


@dataclass(frozen=True)
class Quota:
    """The job's GPU-memory quota on each of its GPUs."""

    bytes: int
    text: Optional[str]  # Slurm's normalised form, e.g. `40G`, when the plugin wrote it


@dataclass(frozen=True)
class RestartHints:
    """What the plugin says after a requeue for GPU memory."""

    restarts: int
    last_event: str  # one of LAST_EVENTS
    last_peak_bytes: int
    batch_scale: float  # multiply per-step memory by this, in [0.01, 1]
    geometry: Optional[BatchGeometry]  # with --gpu-mem-batch: the micro-batch and accumulation to use
    activation_checkpointing: bool  # not even a micro-batch of 1 is expected to fit without it


@dataclass(frozen=True)
class GpuStatus:
    index: int  # the node's GPU number (/dev/nvidiaN), not the CUDA_VISIBLE_DEVICES ordinal
    uuid: str
    used_bytes: int
    peak_bytes: int
    quota_bytes: int
    state: str  # one of GPU_STATES
    hard_limit_bytes: Optional[int]  # the driver's hard limit, while it is in force


@dataclass(frozen=True)
class Prediction:
    gpu_index: int
    seconds_to_quota: int
    suggested_batch_scale: float  # in (0, 1]


@dataclass(frozen=True)
class Status:
    """One version of the watchdog's status file."""

    job_id: int
    updated_at: str  # RFC 3339, changes with every write
    gpus: Tuple[GpuStatus, ...]
    prediction: Optional[Prediction]  # only while some GPU is in `warn`


def read_quota(env: Mapping[str, str] = os.environ) -> Optional[Quota]:
    """The quota, or None for a job without one."""
    text = env.get("GPU_MEM_QUOTA_BYTES")
    if text is None:
        return None
    return Quota(bytes=_positive_int("GPU_MEM_QUOTA_BYTES", text), text=env.get("GPU_MEM_QUOTA"))


def read_restart_hints(env: Mapping[str, str] = os.environ) -> Optional[RestartHints]:
    """The hints of a restart after a GPU-memory event, or None on a run that got none."""
    if "GPU_MEM_QUOTA_RESTARTS" not in env:
        return None
    event = _required(env, "GPU_MEM_QUOTA_LAST_EVENT")
    if event not in LAST_EVENTS:
        raise NodeInfoError(f"GPU_MEM_QUOTA_LAST_EVENT={event!r}: not one of {', '.join(LAST_EVENTS)}")
    scale_text = _required(env, "GPU_MEM_QUOTA_BATCH_SCALE")
    try:
        scale = float(scale_text)
    except ValueError:
        scale = -1.0
    if not 0.01 <= scale <= 1.0:
        raise NodeInfoError(f"GPU_MEM_QUOTA_BATCH_SCALE={scale_text!r}: not a number in [0.01, 1]")
    micro, accum = env.get("GPU_MEM_QUOTA_MICRO_BATCH"), env.get("GPU_MEM_QUOTA_GRAD_ACCUM")
    if (micro is None) != (accum is None):
        raise NodeInfoError("GPU_MEM_QUOTA_MICRO_BATCH and GPU_MEM_QUOTA_GRAD_ACCUM come together; one is missing")
    geometry = None
    if micro is not None and accum is not None:
        geometry = BatchGeometry(_positive_int("GPU_MEM_QUOTA_MICRO_BATCH", micro),
                                 _positive_int("GPU_MEM_QUOTA_GRAD_ACCUM", accum))
    checkpointing = env.get("GPU_MEM_QUOTA_ACTIVATION_CHECKPOINTING")
    if checkpointing not in (None, "1"):
        raise NodeInfoError(f"GPU_MEM_QUOTA_ACTIVATION_CHECKPOINTING={checkpointing!r}: only '1' is ever written")
    return RestartHints(
        restarts=_non_negative_int("GPU_MEM_QUOTA_RESTARTS", env["GPU_MEM_QUOTA_RESTARTS"]),
        last_event=event,
        last_peak_bytes=_non_negative_int("GPU_MEM_QUOTA_LAST_PEAK_BYTES",
                                          _required(env, "GPU_MEM_QUOTA_LAST_PEAK_BYTES")),
        batch_scale=scale,
        geometry=geometry,
        activation_checkpointing=checkpointing == "1",
    )


def status_file_path(env: Mapping[str, str] = os.environ) -> Optional[Path]:
    """Where the watchdog writes the job's status, when one watches it."""
    path = env.get("GPU_MEM_QUOTA_STATUS_FILE")
    return Path(path) if path else None


def read_status(path: Union[str, Path]) -> Status:
    """Parse the status file (schema version 1). Unknown fields are ignored, as the schema asks."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise StatusFileMissing(f"{path}: no status file (the watchdog writes it after its first sample)") from None
    except OSError as error:
        raise NodeInfoError(f"{path}: cannot read the status file: {error.strerror}") from None
    if len(data) > MAX_STATUS_BYTES:
        raise NodeInfoError(f"{path}: {len(data)} bytes; a status file is never over {MAX_STATUS_BYTES}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise NodeInfoError(f"{path}: not UTF-8 (byte {error.start})") from None
    try:
        document = json.loads(text)
    except ValueError as error:  # JSONDecodeError is one
        raise NodeInfoError(f"{path}: not JSON: {error}") from None
    except RecursionError:
        # Nesting deeper than the interpreter's stack: the watchdog's document is three levels deep.
        raise NodeInfoError(f"{path}: JSON nested too deeply to be a status file") from None
    field = _FieldReader(path, document)
    version = field.integer("version")
    if version != STATUS_VERSION:
        raise NodeInfoError(f"{path}: status file version {version}; this package reads version {STATUS_VERSION}")
    gpus = tuple(_gpu_status(field.nested(f"gpus[{i}]", entry)) for i, entry in enumerate(field.array("gpus")))
    prediction = None
    if field.value("prediction") is not None:
        p = field.nested("prediction", field.value("prediction"))
        prediction = Prediction(
            gpu_index=p.integer("gpu_index"),
            seconds_to_quota=p.integer("seconds_to_quota"),
            suggested_batch_scale=p.number("suggested_batch_scale", lambda s: 0 < s <= 1, "in (0, 1]"),
        )
    return Status(job_id=field.integer("job_id"), updated_at=field.string("updated_at"), gpus=gpus,
                  prediction=prediction)


def _gpu_status(field: "_FieldReader") -> GpuStatus:
    state = field.string("state")
    if state not in GPU_STATES:
        raise NodeInfoError(f"{field.where('state')}: {state!r} is not one of {', '.join(GPU_STATES)}")
    hard_limit = field.value("hard_limit_bytes")
    return GpuStatus(
        index=field.integer("index"),
        uuid=field.string("uuid"),
        used_bytes=field.integer("used_bytes"),
        peak_bytes=field.integer("peak_bytes"),
        quota_bytes=field.integer("quota_bytes"),
        state=state,
        hard_limit_bytes=None if hard_limit is None else field.integer("hard_limit_bytes"),
    )


class StatusWatcher:
    """Polls the status file between optimizer steps and hands each new warning over once.

    A warning is the file's prediction; or, for a GPU already over its quota (enforcement under way,
    and no prediction is written for it), one made here: crossing now, scale quota / used, which
    assumes every byte scales with the batch and so shrinks too little rather than too much.
    A missing file is normal (no watchdog yet, or none at all); a malformed one is a warning, once (on
    this module's logger, or to `log`), and then ignored, so that a loop never stops over advice.
    """

    def __init__(self, path: Optional[Union[str, Path]], log: Optional[LogCallable] = None) -> None:
        self.path = None if path is None else Path(path)
        self._log = log
        self._last_seen: Optional[str] = None
        self._last_error: Optional[str] = None

    def new_warning(self) -> Optional[Prediction]:
        if self.path is None:
            return None
        try:
            status = read_status(self.path)
        except StatusFileMissing:
            return None
        except NodeInfoError as error:
            self._report(str(error))
            return None
        except Exception as error:  # noqa: BLE001 - advice never stops a loop, whatever the file holds
            self._report(f"{self.path}: unreadable ({type(error).__name__}: {error})")
            return None
        if status.updated_at == self._last_seen:
            return None
        self._last_seen = status.updated_at
        over = [gpu for gpu in status.gpus if gpu.state == "over-quota" and gpu.used_bytes > 0]
        if over:
            worst = min(over, key=lambda gpu: gpu.quota_bytes / gpu.used_bytes)
            return Prediction(gpu_index=worst.index, seconds_to_quota=0,
                              suggested_batch_scale=max(0.01, min(0.99, worst.quota_bytes / worst.used_bytes)))
        return status.prediction

    def _report(self, error: str) -> None:
        """Once per distinct error: a loop polling a broken file every step would drown its log."""
        if error != self._last_error:
            self._last_error = error
            emit(logger, self._log, logging.WARNING, f"ignoring the status file: {error}")


class _FieldReader:
    """Typed access to one JSON object of the status file, with errors naming the file and the field."""

    def __init__(self, path: Path, document: Any, prefix: str = "") -> None:
        if not isinstance(document, dict):
            raise NodeInfoError(f"{path}: {prefix or 'the document'} is not a JSON object")
        self.path, self.document, self.prefix = path, document, prefix

    def where(self, name: str) -> str:
        return f"{self.path}: {self.prefix}{'.' if self.prefix else ''}{name}"

    def value(self, name: str) -> Any:
        return self.document.get(name)

    def _present(self, name: str) -> Any:
        if name not in self.document:
            raise NodeInfoError(f"{self.where(name)}: missing")
        return self.document[name]

    def integer(self, name: str) -> int:
        value = self._present(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise NodeInfoError(f"{self.where(name)}: {value!r} is not a whole number >= 0")
        return value

    def number(self, name: str, valid: Callable[[float], bool], meaning: str) -> float:
        value = self._present(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not valid(value):
            raise NodeInfoError(f"{self.where(name)}: {value!r} is not a number {meaning}")
        return float(value)

    def string(self, name: str) -> str:
        value = self._present(name)
        if not isinstance(value, str):
            raise NodeInfoError(f"{self.where(name)}: {value!r} is not a string")
        return value

    def array(self, name: str) -> List[Any]:
        value = self._present(name)
        if not isinstance(value, list):
            raise NodeInfoError(f"{self.where(name)}: {value!r} is not an array")
        return value

    def nested(self, name: str, document: Any) -> "_FieldReader":
        return _FieldReader(self.path, document, f"{self.prefix}{'.' if self.prefix else ''}{name}")


def _required(env: Mapping[str, str], name: str) -> str:
    value = env.get(name)
    if value is None:
        raise NodeInfoError(f"{name} is missing although GPU_MEM_QUOTA_RESTARTS is set")
    return value


def _non_negative_int(name: str, text: str) -> int:
    if not text.isdigit():
        raise NodeInfoError(f"{name}={text!r}: not a whole number")
    return int(text)


def _positive_int(name: str, text: str) -> int:
    value = _non_negative_int(name, text)
    if value == 0:
        raise NodeInfoError(f"{name}={text!r}: must be at least 1")
    return value
