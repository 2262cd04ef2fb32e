"""``golemq_worker --processes N``: the parent starts N copies of its own command line (each a
one-process worker), forwards SIGINT/SIGTERM to them once and exits with the worst code."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from types import FrameType

#: Set in the children's environment: each runs one worker, whatever ``--processes`` says.
CHILD_ENV = "GOLEMQ_DJANGO_WORKER_CHILD"


def is_child() -> bool:
    """Whether this process is one of a supervisor's workers."""
    return os.environ.get(CHILD_ENV) == "1"


def supervise(count: int) -> int:
    """Run ``count`` copies of this process's command as children until they all exit."""
    command = [sys.executable, *sys.orig_argv[1:]]
    env = {**os.environ, CHILD_ENV: "1"}
    children: list[subprocess.Popen[bytes]] = []
    forwarded: set[int] = set()

    def forward(signum: int, frame: FrameType | None) -> None:
        del frame
        if signum in forwarded:
            return
        forwarded.add(signum)
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        children.extend(subprocess.Popen(command, env=env) for _ in range(count))  # noqa: S603
        codes = [child.wait() for child in children]
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return max(codes, key=abs, default=0)
