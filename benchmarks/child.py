"""Child process entry for the RSS scenario: drain already-enqueued jobs, print a JSON line.

Usage (by the harness): ``python -m benchmarks.child '{"system": ..., "variant": ...,
"box": {...}, "n": N}'``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from benchmarks.sandbox import Sandbox
from benchmarks.systems import system_named


def _peak_rss() -> int:
    """This process's peak RSS in bytes: VmHWM (reset by exec, unlike ru_maxrss, which a
    child inherits from the process it was forked from), else 0 (the parent samples too)."""
    try:
        for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run one drain as the harness described it; print seconds and peak RSS as JSON."""
    spec = json.loads((argv if argv is not None else sys.argv[1:])[0])
    system = system_named(spec["system"])
    variant = next(v for v in system.variants("rss", quick=False) if v.key == spec["variant"])
    seconds = system.drain(Sandbox.from_json(spec["box"]), variant, int(spec["n"]))
    print(json.dumps({"seconds": seconds, "maxrss_bytes": _peak_rss()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
