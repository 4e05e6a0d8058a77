"""The one way this package writes a file: aside, in the target's directory, then renamed over it."""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path
from typing import BinaryIO, Iterator


@contextlib.contextmanager
def replacing(target: Path, fsync: bool = False) -> Iterator[BinaryIO]:
    """A new file that replaces `target` when the block ends without an error and is removed when
    it does not: a reader sees the old file or the new one, never half of one.

    The temporary is created in the target's directory under a random name with O_EXCL|O_NOFOLLOW:
    in a directory others can write (a group's project directory) a file or symlink planted where
    we would write is never opened, so nothing is written through it (security review K8)."""
    # Not tempfile.mkstemp: its mode 0600 would replace what the umask gives the target today
    # (a checkpoint the project group reads).
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
