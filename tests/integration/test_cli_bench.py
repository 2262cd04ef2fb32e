"""`golemq-pg bench` finds the harness of a source checkout, and says so plainly without one.

The harness (benchmarks/) is not installed with the package. These run the real command in a
subprocess from a directory outside the checkout, in three set-ups:

* the project's own install (editable, as the test suite runs it);
* an editable install that does not map ``benchmarks`` (what pyproject installs once the
  harness is no longer a package of the distribution): the interpreter runs without
  ``site`` so the editable finder is not installed, and ``golemq_pg`` is importable only
  through a symlink to the checkout's package directory; ``benchmarks`` is importable from
  nowhere;
* an installed package without a checkout: a copy of ``golemq_pg`` in a directory of its
  own (as in site-packages), with no ``benchmarks/`` beside it.

``--list`` and the argument checks touch no database.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import golemq_pg

CHECKOUT = Path(golemq_pg.__file__).resolve().parent.parent
SCENARIOS = ("drain", "steady", "latency", "loaded", "bulk", "single", "scale",
             "after-vacuum", "rss", "guarded", "workflow", "dashboard")
NO_HARNESS = (
    "golemq-pg bench runs the harness of a source checkout (benchmarks/ is not installed "
    "with the package)"
)


def _site_packages() -> list[str]:
    """The interpreter's site-packages directories (the dependencies), without their .pth
    files being run (the caller uses ``python -S``)."""
    paths = sysconfig.get_paths()
    return list(dict.fromkeys([paths["purelib"], paths["platlib"]]))


def run(
    args: list[str], cwd: Path, *, pythonpath: list[Path] | None = None, timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run the command in ``cwd``: the installed ``golemq-pg`` script when ``pythonpath`` is
    None, else ``python -S -m golemq_pg.cli`` with exactly ``pythonpath`` + site-packages."""
    env = {k: v for k, v in os.environ.items() if k not in ("GOLEMQ_DEBUG", "PYTHONPATH")}
    if pythonpath is None:
        script = Path(sys.executable).parent / "golemq-pg"
        command = [str(script)] if script.exists() else [sys.executable, "-m", "golemq_pg.cli"]
    else:
        env["PYTHONPATH"] = os.pathsep.join([*map(str, pythonpath), *_site_packages()])
        command = [sys.executable, "-S", "-m", "golemq_pg.cli"]
    return subprocess.run(
        [*command, *args], cwd=cwd, capture_output=True, text=True, env=env,
        timeout=timeout, check=False,
    )


def _importable(module: str, cwd: Path, pythonpath: list[Path]) -> bool:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join([*map(str, pythonpath), *_site_packages()])
    probe = subprocess.run(
        [sys.executable, "-S", "-c", f"import {module}"], cwd=cwd, env=env,
        capture_output=True, text=True, timeout=60, check=False,
    )
    return probe.returncode == 0


def assert_lists_scenarios(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, (result.stdout, result.stderr)
    lines = result.stdout.splitlines()
    scenarios = next(line for line in lines if line.startswith("scenarios:"))
    assert [s.strip() for s in scenarios.split(":", 1)[1].split(",")] == list(SCENARIOS)
    systems = next(line for line in lines if line.startswith("systems:"))
    assert "golemq-pg" in systems
    assert "raw-sql" in systems


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A working directory outside the checkout, with no benchmarks/ of its own."""
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    return cwd


@pytest.fixture
def unmapped_checkout(tmp_path: Path) -> Path:
    """A path entry whose only package is a symlink to the checkout's golemq_pg."""
    entry = tmp_path / "editable"
    entry.mkdir()
    (entry / "golemq_pg").symlink_to(CHECKOUT / "golemq_pg", target_is_directory=True)
    return entry


@pytest.fixture
def installed_copy(tmp_path: Path) -> Path:
    """A path entry holding a copy of golemq_pg and nothing else (a wheel's site-packages)."""
    entry = tmp_path / "site"
    shutil.copytree(CHECKOUT / "golemq_pg", entry / "golemq_pg",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return entry


def test_bench_list_from_outside_the_checkout(elsewhere: Path) -> None:
    assert_lists_scenarios(run(["bench", "--list"], elsewhere))


def test_bench_runs_the_checkout_harness_when_benchmarks_is_not_installed(
    elsewhere: Path, unmapped_checkout: Path,
) -> None:
    assert _importable("golemq_pg", elsewhere, [unmapped_checkout])
    assert not _importable("benchmarks", elsewhere, [unmapped_checkout])
    assert_lists_scenarios(run(["bench", "--list"], elsewhere, pythonpath=[unmapped_checkout]))
    # The harness's own help and exit codes come through unchanged.
    helped = run(["bench", "--help"], elsewhere, pythonpath=[unmapped_checkout])
    assert helped.returncode == 0, helped.stderr
    assert "usage: python -m benchmarks" in helped.stdout
    assert "--quick" in helped.stdout
    refused = run(["bench", "--runs", "0"], elsewhere, pythonpath=[unmapped_checkout])
    assert refused.returncode == 2, (refused.stdout, refused.stderr)
    assert "--runs must be at least 1" in refused.stdout + refused.stderr
    assert not (elsewhere / "benchmarks").exists()  # nothing written in the caller's cwd


def test_bench_without_a_checkout_fails_with_one_line_and_exit_2(
    elsewhere: Path, installed_copy: Path,
) -> None:
    assert not _importable("benchmarks", elsewhere, [installed_copy])
    for args in (["bench", "--list"], ["bench"], ["bench", "--quick"],
                 ["--dsn", "postgresql://nobody@127.0.0.1:1/none", "bench", "--quick"]):
        result = run(args, elsewhere, pythonpath=[installed_copy])
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert result.stdout == ""
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("golemq-pg: error: " + NO_HARNESS)
        assert "pip install -e" in lines[0]
        assert "python -m benchmarks" in lines[0]
        assert "Traceback" not in result.stderr


def test_bench_help_without_a_checkout_still_shows_help(
    elsewhere: Path, installed_copy: Path,
) -> None:
    for flag in ("--help", "-h"):
        result = run(["bench", flag], elsewhere, pythonpath=[installed_copy])
        assert result.returncode == 0, (result.stdout, result.stderr)
        assert "Usage: golemq-pg bench" in result.stdout
        assert "--dsn" in result.stdout
        assert NO_HARNESS in result.stdout
        assert result.stderr == ""
    # The command list still names bench.
    listed = run(["--help"], elsewhere, pythonpath=[installed_copy])
    assert listed.returncode == 0
    assert "bench" in listed.stdout
