"""``python -m django golemq_worker`` as a subprocess of the Django backend's tests, on the
test database pytest-django created (its DSN in ``$GOLEMQ_DJANGO_DSN``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
READY = "golemq worker running"


class DjangoWorker:
    """One worker process; its output goes to ``log`` (read on failure)."""

    def __init__(self, dsn: str, log: Path, args: Sequence[str]) -> None:
        self.log = log
        env = {**os.environ, "GOLEMQ_DJANGO_DSN": dsn,
               "DJANGO_SETTINGS_MODULE": "tests.support.django_settings",
               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "django", "golemq_worker", *args],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            )

    def output(self) -> str:
        """Everything the process printed so far."""
        return self.log.read_text(errors="replace")

    def wait_ready(self) -> None:
        """Until it has found its tasks and is starting (fails if it exits first)."""
        wait_until(lambda: READY in self.output() or self.proc.poll() is not None,
                   timeout=30, what=self.output)
        assert self.proc.poll() is None, self.output()

    def terminate(self, timeout: float = 30) -> int:
        """SIGTERM, then its exit code (killed, and the test failed, if it hangs)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"the worker ignored SIGTERM:\n{self.output()}") from None
