"""Typed job declarations: mypy accepts correct uses of ``JobType`` and rejects wrong ones.

``typed_uses.py`` (next to this file) holds both. Every line that must be rejected ends with
``# expect: <code>[, <code>...]``; this test runs ``mypy --strict`` on it and asserts that
exactly those lines fail, with exactly those error codes, and that nothing else does.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SAMPLE = Path(__file__).with_name("typed_uses.py")
ROOT = Path(__file__).resolve().parents[2]
EXPECT = re.compile(r"#\s*expect:\s*(?P<codes>[a-z0-9-]+(?:\s*,\s*[a-z0-9-]+)*)\s*$")
ERROR = re.compile(
    r"^(?P<path>[^:]+):(?P<line>\d+): error: (?P<message>.*?)\s+\[(?P<code>[a-z0-9-]+)\]$"
)


def expected_errors() -> set[tuple[int, str]]:
    found: set[tuple[int, str]] = set()
    for number, text in enumerate(SAMPLE.read_text().splitlines(), start=1):
        match = EXPECT.search(text)
        if match:
            found.update((number, code.strip()) for code in match["codes"].split(","))
    return found


def run_mypy(cache_dir: Path) -> tuple[set[tuple[int, str]], str]:
    proc = subprocess.run(
        [
            sys.executable, "-m", "mypy",
            "--config-file", str(ROOT / "pyproject.toml"),
            "--strict",
            "--show-error-codes",
            "--no-error-summary",
            "--no-pretty",
            "--cache-dir", str(cache_dir),
            str(SAMPLE),
        ],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    output = proc.stdout + proc.stderr
    errors: set[tuple[int, str]] = set()
    for line in output.splitlines():
        match = ERROR.match(line)
        if match:
            assert Path(match["path"]).name == SAMPLE.name, line
            errors.add((int(match["line"]), match["code"]))
        elif ": note: " not in line and line.strip():
            raise AssertionError(f"unexpected mypy output: {line}\n{output}")
    # mypy exits 1 when it found errors, 2 when it could not run at all.
    assert proc.returncode in (0, 1), output
    return errors, output


def test_mypy_checks_typed_jobs(tmp_path: Path) -> None:
    expected = expected_errors()
    assert len(expected) >= 10  # the sample really exercises the rejections
    found, output = run_mypy(tmp_path / "mypy-cache")
    missing = sorted(expected - found)
    unexpected = sorted(found - expected)
    assert not missing, f"mypy accepted lines it must reject: {missing}\n{output}"
    assert not unexpected, f"mypy rejected lines it must accept: {unexpected}\n{output}"
