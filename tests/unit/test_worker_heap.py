"""The first worker started in a process freezes the start-up heap out of the cyclic
collector's scans (golemq_pg.worker.heap); each case runs in a fresh interpreter, since the
freeze is once per process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

_SCRIPT = textwrap.dedent(
    """
    import gc, sys
    from golemq_pg.testing import InMemoryStore
    from golemq_pg import Worker
    if sys.argv[1] == "app-froze":
        gc.freeze()
    if sys.argv[1] == "collector-off":
        gc.disable()
    before = gc.get_freeze_count()
    kept = [[i] for i in range(10000)]  # alive at the first start: frozen with the heap
    worker = Worker(InMemoryStore())
    worker.handler("noop")(lambda job: None)
    worker.run_until_empty(timeout=10)
    first = gc.get_freeze_count()
    later = [[i] for i in range(10000)]  # made after the first start: never frozen
    worker.run_until_empty(timeout=10)
    print(before, first, gc.get_freeze_count())
    """
)


def _freeze_counts(mode: str) -> tuple[int, int, int]:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, mode], capture_output=True, text=True, timeout=60,
        check=True,
    )
    # The last line: the worker logs to stdout before it.
    before, first, second = (int(n) for n in done.stdout.splitlines()[-1].split())
    return before, first, second


def test_the_first_worker_start_freezes_the_heap_and_later_starts_do_not() -> None:
    before, first, second = _freeze_counts("plain")
    assert before == 0
    assert first > 10000  # the heap, with the objects alive at the start
    # A second start freezes nothing more: objects made since stay collectable.
    assert second < first + 10000


def test_a_heap_the_application_froze_itself_is_left_alone() -> None:
    before, first, second = _freeze_counts("app-froze")
    assert before > 0
    # The objects made after the application's own freeze were not frozen by the worker.
    assert first < before + 10000
    assert second < before + 10000


def test_a_disabled_collector_is_left_alone() -> None:
    before, first, second = _freeze_counts("collector-off")
    assert (before, first, second) == (0, 0, 0)
