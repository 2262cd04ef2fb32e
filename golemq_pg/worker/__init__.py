"""The worker: a synchronous thread-pool dispatcher over the JobStore port.

Public names: :class:`Worker`, and what handlers receive: :class:`JobEvent`,
:class:`BatchEvent`, :class:`CancelSignal`; what ``Worker(middleware=...)`` takes:
:data:`Middleware`. The modules of this package are private.
"""

from golemq_pg.worker.events import BatchEvent, CancelSignal, JobEvent
from golemq_pg.worker.middleware import Middleware
from golemq_pg.worker.worker import Worker

__all__ = ["BatchEvent", "CancelSignal", "JobEvent", "Middleware", "Worker"]
