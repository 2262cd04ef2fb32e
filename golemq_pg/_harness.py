"""Where ``golemq-pg bench`` finds the benchmark harness: the source checkout's
``benchmarks/`` folder, which is not installed with the package.

An editable install (``pip install -e .``) imports ``golemq_pg`` from the checkout itself,
so the harness is ``<checkout>/benchmarks/__main__.py`` beside the package directory. A
wheel installs ``golemq_pg`` alone into site-packages: there is no harness to run.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

#: What ``golemq-pg bench`` says (exit code 2) when there is no checkout beside the package.
UNAVAILABLE = (
    "golemq-pg bench runs the harness of a source checkout (benchmarks/ is not installed with "
    "the package): clone the repository, `pip install -e '.[bench]'` in it, and run "
    "`golemq-pg bench` or `python -m benchmarks` there"
)


def checkout_root() -> Path | None:
    """The source checkout this ``golemq_pg`` was imported from, if it holds the harness."""
    root = Path(__file__).resolve().parent.parent
    return root if (root / "benchmarks" / "__main__.py").is_file() else None


def load(root: Path) -> Callable[[list[str]], object]:
    """``benchmarks.__main__.main`` of the checkout at ``root``, imported in this process
    (so Ctrl-C, SIGTERM, exit codes and the console output are the harness's own).

    Raises ImportError when the harness cannot be imported, or when another module named
    ``benchmarks`` (not this checkout's) is already loaded.
    """
    loaded = sys.modules.get("benchmarks")
    where = getattr(loaded, "__file__", None)
    if loaded is not None and (where is None or Path(where).resolve().parent.parent != root):
        raise ImportError(f"another module named 'benchmarks' is already imported ({where})")
    entry = str(root)
    sys.path.insert(0, entry)
    try:
        # Imported by name: the harness lives outside the typed package. Its submodules load
        # through the package's __path__, so the path entry is only needed for this import;
        # its worker children get the checkout in PYTHONPATH from the harness itself.
        module = importlib.import_module("benchmarks.__main__")
    finally:
        with suppress(ValueError):
            sys.path.remove(entry)
    main_fn: Callable[[list[str]], object] = module.main
    return main_fn
