"""``python manage.py golemq_worker``: run the project's tasks until SIGINT/SIGTERM."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from golemq_pg.contrib.django._processes import is_child, supervise
from golemq_pg.contrib.django._tasks_api import InvalidTask
from golemq_pg.contrib.django.worker import build_worker


class Command(BaseCommand):
    """Run every ``@task`` of the installed apps (and ``OPTIONS["modules"]``) on golemq-pg;
    SIGINT/SIGTERM stop it gracefully (attempts in flight finish) with exit 0."""

    help = "Run the golemq-pg worker for this project's Django tasks."

    def add_arguments(self, parser: CommandParser) -> None:
        """``--queue`` (repeatable), ``--concurrency``, ``--processes``, ``--backend``."""
        parser.add_argument("--queue", action="append", default=[], metavar="QUEUE",
                            help="run only the tasks declared on this queue (repeatable)")
        parser.add_argument("--concurrency", type=int, default=4,
                            help="attempts at once in each process (default 4)")
        parser.add_argument("--processes", type=int, default=1,
                            help="worker processes to run (default 1)")
        parser.add_argument("--backend", default="default",
                            help="the TASKS alias whose tasks to run (default 'default')")

    def handle(self, *args: Any, **options: Any) -> None:
        """Start the worker (or ``--processes`` of them) and block until stopped."""
        concurrency, processes = options["concurrency"], options["processes"]
        if concurrency < 1:
            raise CommandError("--concurrency must be at least 1")
        if processes < 1:
            raise CommandError("--processes must be at least 1")
        if processes > 1 and not is_child():
            code = supervise(processes)
            if code != 0:
                sys.exit(code)
            return
        try:
            worker = build_worker(options["backend"], queues=options["queue"],
                                  concurrency=concurrency)
        except InvalidTask as exc:
            raise CommandError(str(exc)) from None
        types = worker.handler_types
        if not types:
            raise CommandError("no tasks found for this worker (see OPTIONS['modules'])")
        self.stdout.write(f"golemq worker running {len(types)} task(s): {', '.join(types)}")
        self.stdout.flush()
        worker.run()
