"""Worker RSS: the consumer drains in a child process whose memory the parent samples."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.sandbox import Sandbox
from benchmarks.systems.base import System, UnavailableError, Variant

SAMPLE_EVERY = 0.02
TIMEOUT = 1800


def drain_in_child(system: System, variant: Variant, box: Sandbox, n: int) -> tuple[int, float]:
    """Drain ``n`` jobs in ``python -m benchmarks.child``; (peak RSS bytes, drain seconds).

    The peak is the larger of the parent's 20 ms samples and the child's own ru_maxrss.
    """
    try:
        import psutil  # noqa: PLC0415 - optional: the bench extra installs it
    except ImportError as exc:
        raise UnavailableError("psutil not installed; pip install 'golemq-pg[bench]'") from exc
    spec = json.dumps({"system": system.name, "variant": variant.key, "box": box.to_json(),
                       "n": n})
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    with tempfile.TemporaryFile("w+") as errors:
        proc = subprocess.Popen([sys.executable, "-m", "benchmarks.child", spec],
                                stdout=subprocess.PIPE, stderr=errors, text=True, env=env)
        peak = 0
        deadline = time.monotonic() + TIMEOUT
        watched = psutil.Process(proc.pid)
        while proc.poll() is None:
            try:
                peak = max(peak, watched.memory_info().rss)
            except psutil.Error:
                break
            if time.monotonic() > deadline:
                proc.kill()
                break
            time.sleep(SAMPLE_EVERY)
        out, _ = proc.communicate()
        if proc.returncode != 0:
            errors.seek(0)
            tail = errors.read()[-2000:]
            raise RuntimeError(f"worker child exited with {proc.returncode}: {tail}")
    report = json.loads(out.strip().splitlines()[-1])
    return max(peak, int(report["maxrss_bytes"])), float(report["seconds"])
