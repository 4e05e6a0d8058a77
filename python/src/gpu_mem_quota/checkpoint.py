"""Requeue-safe checkpoints: save on the signal that comes before a requeue, resume from it after.

Before a requeue (or at a time limit, with `sbatch --signal`) a job gets SIGTERM and, KillWait seconds
later (30 by default), SIGKILL; the watchdog may also send SIGUSR1 with an early warning, whose default
action would end the process. The handlers here only note the signal: the state is saved at the next
step boundary, where it is consistent, so a step must be shorter than KillWait for a SIGTERM save to
make it. The file is written aside and renamed, so a kill mid-save leaves the previous checkpoint.

The batch script must `exec` the training process (or start it with `srun`): Slurm signals every
process of the batch step, and a shell waiting for its child dies of the SIGTERM at once; the step
has then ended and Slurm kills what is left of it with SIGKILL, KillWait or not (seen on Slurm 22.05
with `scontrol requeue` and `scancel`; `tests/e2e/torch_job.rs`).
"""

from __future__ import annotations

import json
import os
import pickle
import signal
from pathlib import Path
from typing import Any, BinaryIO, Callable, Optional, Tuple, Union

from .geometry import BatchGeometry


class RequeueCheckpoint:
    def __init__(self, path: Union[str, Path], dump: Callable[[Any, BinaryIO], None] = pickle.dump,
                 load: Callable[[BinaryIO], Any] = pickle.load) -> None:
        """`dump` and `load` write and read one object to and from a binary file: pickle by default,
        `torch.save` and `torch.load` for tensors."""
        self.path = Path(path)
        self._dump, self._load = dump, load
        self.pending: Optional[signal.Signals] = None

    def install(self, signals: tuple = (signal.SIGUSR1, signal.SIGTERM)) -> "RequeueCheckpoint":
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
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        with tmp.open("wb") as f:
            self._dump(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def at_step_boundary(self, state: Callable[[], Any]) -> bool:
        """Call between optimizer steps. Saves `state()` if a signal came; True when it was SIGTERM,
        and the loop should now return (the job is about to be requeued or cancelled)."""
        if self.pending is None:
            return False
        received, self.pending = self.pending, None
        self.save(state())
        return received == signal.SIGTERM


class GeometryFile:
    """The geometry a run ended with, for frameworks that take a new micro-batch only at a restart
    (Lightning, the Hugging Face Trainer, DeepSpeed): written next to their checkpoint, read at start."""

    def __init__(self, path: Union[str, Path]) -> None:
        self.path = Path(path)

    def save(self, geometry: BatchGeometry, activation_checkpointing: bool) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text(json.dumps({"micro": geometry.micro, "accum": geometry.accum,
                                   "activation_checkpointing": activation_checkpointing}) + "\n")
        os.replace(tmp, self.path)

    def load(self) -> Optional[Tuple[BatchGeometry, bool]]:
        """The saved geometry and checkpointing flag; None on a first run. A broken file is an error
        naming it: it is this package's own, so something went wrong that should not be guessed over."""
        try:
            document = json.loads(self.path.read_text())
            return BatchGeometry(int(document["micro"]), int(document["accum"])), bool(
                document["activation_checkpointing"])
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{self.path}: not a geometry file: {error}") from None
