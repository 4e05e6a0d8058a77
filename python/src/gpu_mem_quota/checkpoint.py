"""Requeue-safe checkpoints: save on the signal that comes before a requeue, resume from it after.

Before a requeue (or at a time limit, with `sbatch --signal`) a job gets SIGTERM and, KillWait seconds
later (30 by default), SIGKILL; the watchdog may also send SIGUSR1 with an early warning, whose default
action would end the process. The handlers here only note the signal: the state is saved at the next
step boundary, where it is consistent, so a step must be shorter than KillWait for a SIGTERM save to
make it. The file is written aside and renamed, so a kill mid-save leaves the previous checkpoint.

The state is JSON by default, or tensors through `RequeueCheckpoint.for_torch` (`weights_only=True`):
loading a pickle runs code, so pickle is an opt-in (`allow_pickle=True`) for files no one else can write.

The batch script must `exec` the training process (or start it with `srun`): Slurm signals every
process of the batch step, and a shell waiting for its child dies of the SIGTERM at once; the step
has then ended and Slurm kills what is left of it with SIGKILL, KillWait or not (seen on Slurm 22.05
with `scontrol requeue` and `scancel`; `tests/e2e/torch_job.rs`).
"""

from __future__ import annotations

import json
import pickle
import signal
from pathlib import Path
from typing import Any, BinaryIO, Callable, Dict, Optional, Tuple, Union

from ._files import replacing
from .geometry import BatchGeometry


class RequeueCheckpoint:
    def __init__(self, path: Union[str, Path], dump: Optional[Callable[[Any, BinaryIO], None]] = None,
                 load: Optional[Callable[[BinaryIO], Any]] = None, *, allow_pickle: bool = False) -> None:
        """`dump` and `load` write and read one object to and from a binary file. By default the
        state is JSON: dicts, lists, strings, numbers, booleans and None, and loading it runs nothing.
        For tensors and state dicts, `RequeueCheckpoint.for_torch(path)`.

        A pickled checkpoint is code: loading one runs whatever its file says, so whoever can write
        the file (or the directory it is in: a group's project directory) runs code in your job.
        `allow_pickle=True` saves and loads any object with pickle; use it only where no one else can
        write. A `load` of your own (`torch.load` before 2.6, say) may unpickle too: that is yours."""
        if (dump is None) != (load is None):
            raise TypeError("dump and load go together")
        if allow_pickle and dump is not None:
            raise TypeError("allow_pickle chooses pickle: give it without dump and load")
        self.path = Path(path)
        self._dump: Callable[[Any, BinaryIO], None]
        self._load: Callable[[BinaryIO], Any]
        if dump is not None and load is not None:
            self._dump, self._load = dump, load
        elif allow_pickle:
            self._dump, self._load = pickle.dump, pickle.load
        else:
            self._dump, self._load = _dump_json, _load_json
        self.pending: Optional[signal.Signals] = None

    @classmethod
    def for_torch(cls, path: Union[str, Path], *, allow_pickle: bool = False) -> "RequeueCheckpoint":
        """`torch.save`, and `torch.load` with `weights_only=True`: tensors, state dicts, and plain
        containers, numbers and strings load; any other object is refused, not unpickled.
        `allow_pickle=True` loads any object (`weights_only=False`), which runs the code the file holds."""
        import torch  # here, not at the top: the package's core is standard library only

        return cls(path, torch.save, lambda f: torch.load(f, weights_only=not allow_pickle))

    def install(self, signals: Tuple[signal.Signals, ...] = (signal.SIGUSR1, signal.SIGTERM)) -> "RequeueCheckpoint":
        """Handle these signals (from the main thread, as Python requires)."""
        for signum in signals:
            signal.signal(signum, self._note)
        return self

    def _note(self, signum: int, _frame: object) -> None:
        # SIGTERM outranks SIGUSR1: once told to stop, a later warning must not undo it.
        if self.pending != signal.SIGTERM:
            self.pending = signal.Signals(signum)

    def load(self) -> Optional[Any]:
        """The last saved state, or None on a first run."""
        try:
            with self.path.open("rb") as f:
                return self._load(f)
        except FileNotFoundError:
            return None

    def save(self, state: Any) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with replacing(self.path, fsync=True) as f:
            self._dump(state, f)

    def at_step_boundary(self, state: Callable[[], Any]) -> bool:
        """Call between optimizer steps. Saves `state()` if a signal came; True when it was SIGTERM,
        and the loop should now return (the job is about to be requeued or cancelled)."""
        if self.pending is None:
            return False
        received, self.pending = self.pending, None
        self.save(state())
        return received == signal.SIGTERM


def _dump_json(state: Any, f: BinaryIO) -> None:
    try:
        text = json.dumps(state)
    except TypeError as error:  # at the first save, not a surprise at a requeue much later
        raise TypeError(f"{error}: a RequeueCheckpoint holds JSON by default; for tensors use "
                        "RequeueCheckpoint.for_torch") from None
    f.write(text.encode() + b"\n")


def _load_json(f: BinaryIO) -> Any:
    try:
        return json.loads(f.read())
    except (ValueError, RecursionError) as error:  # RecursionError: nested past the interpreter's stack
        raise ValueError(f"{f.name}: not a JSON checkpoint ({error}); one written with pickle loads only "
                         "with allow_pickle=True, which runs the code it holds") from None


# A geometry and its activation checkpointing flag, as a restart-based adapter leaves them for the next run.
SavedGeometry = Tuple[BatchGeometry, bool]


def geometry_state(geometry: BatchGeometry, activation_checkpointing: bool) -> Dict[str, Any]:
    """The geometry as plain values: what a framework's checkpoint and the geometry file hold."""
    return {"micro": geometry.micro, "accum": geometry.accum, "activation_checkpointing": activation_checkpointing}


def geometry_from_state(state: Any, where: str) -> SavedGeometry:
    """`geometry_state`'s values back; a ValueError that starts with `where` for anything else: it is this
    package's own, so something went wrong that should not be guessed over."""
    try:
        return BatchGeometry(int(state["micro"]), int(state["accum"])), bool(state["activation_checkpointing"])
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{where}: {type(error).__name__}: {error}") from None


def restart_geometry(in_checkpoint: Optional[SavedGeometry],
                     in_file: Optional[SavedGeometry]) -> Optional[SavedGeometry]:
    """Where a restart-based run starts: the geometry its framework's checkpoint holds, or the geometry
    file's where that is smaller (an OOM after the checkpoint, which could save none) or the checkpoint
    holds none (one written before the geometry rode in checkpoints). The restart-based adapters only
    shrink, so the smaller of the two is the later; one of another effective batch is not this run's."""
    if in_checkpoint is None:
        return in_file
    if in_file is not None and in_file[0].effective == in_checkpoint[0].effective:
        if (in_file[0].micro, not in_file[1]) < (in_checkpoint[0].micro, not in_checkpoint[1]):
            return in_file
    return in_checkpoint


class GeometryFile:
    """The geometry a run ended with where its framework could save no checkpoint (an out-of-memory
    error ended it), read at the next start with the checkpoint's (`restart_geometry`). Runs before
    the geometry rode in the frameworks' checkpoints left every change here."""

    def __init__(self, path: Union[str, Path]) -> None:
        self.path = Path(path)

    def save(self, geometry: BatchGeometry, activation_checkpointing: bool) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with replacing(self.path) as f:
            f.write(json.dumps(geometry_state(geometry, activation_checkpointing)).encode() + b"\n")

    def load(self) -> Optional[SavedGeometry]:
        """The saved geometry and checkpointing flag; None on a first run. A broken file is an error
        naming it: it is this package's own, so something went wrong that should not be guessed over."""
        try:
            document = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (ValueError, RecursionError) as error:
            raise ValueError(f"{self.path}: not a geometry file: {type(error).__name__}: {error}") from None
        return geometry_from_state(document, f"{self.path}: not a geometry file")
