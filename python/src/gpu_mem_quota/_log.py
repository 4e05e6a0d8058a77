"""Where the package's messages go: to the `log` callable a caller gave (the API's `log=`), else to the
module's logger (`logging.getLogger("gpu_mem_quota.<module>")`), which the application configures.
The package never configures logging itself: without a handler, Python prints warnings and drops the
rest, as for any library."""

from __future__ import annotations

import logging
from typing import Callable, Optional

# A caller's own sink for the package's lines, each a complete sentence without a prefix.
LogCallable = Callable[[str], None]


def emit(logger: logging.Logger, log: Optional[LogCallable], level: int, line: str) -> None:
    if log is not None:
        log(line)
    else:
        logger.log(level, line)
