"""Public value types shared by the producer, the worker and the stores."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final, Generic, Literal, NamedTuple, Protocol, TypeVar

Duration = float | int | timedelta


class Unlimited(enum.Enum):
    """The type of :data:`UNLIMITED` (its only member)."""

    UNLIMITED = "unlimited"

    def __repr__(self) -> str:
        return "UNLIMITED"


#: ``max_attempts=UNLIMITED``: a job retried until it succeeds, fails terminally
#: (``TerminalJobError``, a ``retry_strategy`` returning None) or is cancelled; each retry
#: waits the usual backoff, capped by the worker's ``max_backoff``. Stored as NULL, read
#: back as ``None`` (``JobSummary.max_attempts``, ``JobEvent.max_attempts``,
#: ``RetryContext.max_attempts``). ``max_attempts=None`` keeps meaning "the default".
UNLIMITED: Final = Unlimited.UNLIMITED

def check_attempt_budget(value: object, what: str = "max_attempts") -> int | None:
    """An attempt budget as the stores keep it: a positive int that fits the column (at
    most 2**31-1), or None for :data:`UNLIMITED`. ``None`` itself is refused here (callers
    resolve "the default" first). Errors are ``ValueError`` naming ``what``."""
    if value is UNLIMITED:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{what} must be a positive integer or UNLIMITED")
    if value > 2**31 - 1:
        raise ValueError(f"{what} must be at most {2**31 - 1} (2**31-1)")
    return value


#: What ``max_attempts=`` takes: a positive int (at most 2**31-1), :data:`UNLIMITED`, or
#: None for the default that applies (the JobType's, else the enqueuer's).
MaxAttempts = int | Literal[Unlimited.UNLIMITED] | None


class JobStatus(enum.StrEnum):
    """The states a job row can be in (cancelled jobs are deleted, not a state).

    ``WAITING``: a job added with ``depends_on`` (or after other nodes of a workflow) whose
    parents have not all finished; it is not due, holds its dedupe key and becomes
    ``PENDING`` in the transaction that finishes its last parent.
    """

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    WAITING = "waiting"


#: The state machine as data: which status may follow which, and on which verb.
#: Mirrored by the CHECK constraint on ``jobs.status`` and documented in ARCHITECTURE.md.
TRANSITIONS: Mapping[tuple[JobStatus, str], JobStatus] = {
    (JobStatus.PENDING, "claim"): JobStatus.RUNNING,
    (JobStatus.RUNNING, "complete"): JobStatus.SUCCEEDED,
    (JobStatus.RUNNING, "retry"): JobStatus.PENDING,
    (JobStatus.RUNNING, "release"): JobStatus.PENDING,
    (JobStatus.RUNNING, "fail"): JobStatus.FAILED,
    (JobStatus.RUNNING, "reclaim"): JobStatus.PENDING,
    (JobStatus.RUNNING, "exhaust"): JobStatus.FAILED,
    (JobStatus.FAILED, "retry_failed"): JobStatus.PENDING,
    (JobStatus.WAITING, "parents_done"): JobStatus.PENDING,
    (JobStatus.WAITING, "parent_failed"): JobStatus.FAILED,
    (JobStatus.FAILED, "parent_retried"): JobStatus.WAITING,
}

#: What a child does when one of its parents fails (dead-lettered) or is cancelled:
#: ``"fail"`` dead-letters it (``last_error`` names the parent: ``parent 123 failed``),
#: ``"cancel"`` cancels it (deletes it, as every cancelled job), ``"run"`` makes it due
#: anyway once no parent is left unfinished. The outcome propagates to its own children.
ParentFailurePolicy = Literal["fail", "cancel", "run"]
PARENT_FAILURE_POLICIES: tuple[str, ...] = ("fail", "cancel", "run")


class Scope(NamedTuple):
    """What a job is about: ``Scope("Article", "a1")``."""

    type: str
    id: str


ScopeLike = Scope | tuple[str, str]


@dataclass(frozen=True, slots=True)
class AttemptError:
    """One failed attempt of a job, as kept in its history (``JobSummary.errors``).

    ``error`` is the same bounded text as ``last_error`` (type and first line of the
    message, never the payload); ``worker_id`` is None when the reaper recorded the failure
    (a lease that expired) rather than the worker that ran it. ``traceback`` is the
    exception's traceback as the standard ``traceback`` module formats it, without locals,
    its last 16 KiB; None when nothing was raised (a handler that returned False, a timeout,
    the reaper's lost lease) or the attempt was recorded before tracebacks were kept. It
    holds the whole exception message and source lines, so it is shown only where the
    payload may be (the dashboard's job page, ``golemq-pg show``) and never logged.
    ``started_at`` is when the attempt began (its handler's start since migration 0015, its
    claim before), so ``at - started_at`` is its duration; None for attempts recorded before
    migration 0012 kept it.
    """

    attempt: int
    at: datetime
    error: str
    worker_id: str | None
    traceback: str | None = None
    started_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class PausedType:
    """A job type no worker claims until it is resumed (``Queue.pause``)."""

    type: str
    paused_at: datetime
    reason: str | None


#: The states a registered worker can be in; "lost" is derived (heartbeat too old).
WorkerState = Literal["running", "stopping", "lost"]


@dataclass(frozen=True, slots=True)
class WorkerSummary:
    """A registered worker process (``Queue.workers``)."""

    worker_id: str
    host: str
    pid: int
    started_at: datetime
    last_seen_at: datetime
    #: type -> concurrency of the handlers it runs.
    handlers: dict[str, int]
    #: Jobs whose handlers were running at its last heartbeat (a job claimed into its buffer,
    #: not started yet, is not counted: it is PENDING).
    running: int
    state: WorkerState


@dataclass(frozen=True, slots=True)
class JobSummary:
    """A read-only snapshot of one job row, as returned by inspection calls.

    ``started_at`` is when the handler of its latest attempt started. A job a worker leased
    but whose handler has not started yet (waiting in the worker's buffer for a thread) has
    ``status`` PENDING and ``started_at`` None, although its attempt is counted.
    """

    id: str
    type: str
    scope: Scope | None
    status: JobStatus
    attempts: int
    #: The attempt budget; None when unlimited (``max_attempts=UNLIMITED``).
    max_attempts: int | None
    last_error: str | None
    priority: int
    progress: float | dict[str, Any] | None
    run_at: datetime
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    #: What the handler returned (SUCCEEDED jobs whose handler returned a value), else None.
    result: Any = None
    #: The last 20 failed attempts, oldest first.
    errors: tuple[AttemptError, ...] = ()
    tags: tuple[str, ...] = ()
    #: The job's durable steps (``job.step(name, fn)``): name -> stored value; empty when
    #: it has none. Filled by ``get``, ``wait`` and ``find``. Not part of the hash.
    steps: dict[str, Any] = field(default_factory=dict, hash=False)


@dataclass(frozen=True, slots=True, eq=False)
class WorkflowNode:
    """One job of a :class:`~golemq_pg.workflow.Workflow` before it is added: what
    ``Workflow.add`` returns, to name it in a later node's ``after=`` and to find its job
    id in :attr:`WorkflowRun.job_ids`. Opaque; hashable and equal by identity."""

    #: Its position in its workflow (nodes are added in order, parents first).
    index: int
    #: Its job type's name.
    type: str

    def __repr__(self) -> str:
        return f"WorkflowNode({self.index}, {self.type!r})"


@dataclass(frozen=True, slots=True)
class WorkflowRun:
    """What ``queue.add_workflow`` wrote: the workflow's id and each node's job id."""

    id: str
    job_ids: dict[WorkflowNode, str]


#: ``WorkflowSummary.status``: ``"running"`` while a job of it is live (waiting, pending or
#: running), ``"succeeded"`` when every job succeeded, ``"failed"`` when a job is FAILED and
#: nothing is left to run, ``"cancelled"`` after ``queue.cancel_workflow``.
WorkflowStatus = Literal["running", "succeeded", "failed", "cancelled"]


@dataclass(frozen=True, slots=True)
class WorkflowSummary:
    """A workflow as stored (``queue.workflow(id)``).

    ``jobs``: its jobs that still exist (a cancelled job is deleted; pruned ones are gone),
    by id; ``edges``: ``(parent id, child id)`` for every dependency between its jobs, by
    parent then child. ``finished_at``: when its last job finished or it was cancelled;
    None while running. Its record outlives its jobs until pruned with them.
    """

    id: str
    name: str
    status: WorkflowStatus
    created_at: datetime
    finished_at: datetime | None
    jobs: list[JobSummary]
    edges: list[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class ScheduleSummary:
    """A recurring schedule as stored."""

    key: str
    type: str
    cron: str | None
    every: timedelta | None
    timezone: str
    repeat_from: str
    next_run_at: datetime | None
    last_run_at: datetime | None
    #: Paused by ``Queue.pause_schedule``: no tick fires until ``resume_schedule``.
    paused: bool = False


@dataclass(frozen=True, slots=True)
class Resource:
    """A pool shared by several job types across every worker.

    ``concurrency`` caps the summed cost of live-leased member jobs; ``rate_per_minute``
    caps the summed rate cost of attempts started in a fixed one-minute window.
    """

    concurrency: int | None = None
    rate_per_minute: int | None = None
    types: Sequence[str] = ()
    costs: Mapping[str, int] = field(default_factory=dict)
    rate_costs: Mapping[str, int] = field(default_factory=dict)

    def cost_of(self, job_type: str) -> int:
        """Concurrency cost of one running job of ``job_type`` (default 1)."""
        return int(self.costs.get(job_type, 1))

    def rate_cost_of(self, job_type: str) -> int:
        """Rate budget spent by one attempt of ``job_type`` (default 1)."""
        return int(self.rate_costs.get(job_type, 1))


@dataclass(frozen=True, slots=True)
class Retention:
    """Background pruning of finished rows (opt-in on the Worker)."""

    older_than: Duration
    sweep_interval: Duration = 300
    statuses: Sequence[JobStatus] = (JobStatus.SUCCEEDED, JobStatus.FAILED)


@dataclass(frozen=True, slots=True)
class RetryContext:
    """What a custom ``retry_strategy`` is told about a failed attempt."""

    job_id: str
    type: str
    attempt: int
    #: The job's attempt budget; None when unlimited (``max_attempts=UNLIMITED``).
    max_attempts: int | None
    error: BaseException


RetryStrategy = Callable[[RetryContext], float | None]


@dataclass(frozen=True, slots=True)
class Transition:
    """One lifecycle event of a job, delivered to observers.

    ``duration``: the handler's run time in seconds (on the outcome of an attempt);
    ``wait``: seconds from the job's due time to its handler starting (on ``"started"``);
    ``result``: on ``"succeeded"``, the result stored with the job (what the handler
    returned, as ``JobSummary.result`` reads it back), else None; ``stuck_for``: on
    ``"reclaimed"``, seconds from the last write of the lease (its claim or renewal) to its
    recovery by the reaper or ``queue.requeue_stale``, else None.
    """

    job_id: str
    type: str
    scope: Scope | None
    outcome: str
    attempts: int
    error: str | None = None
    duration: float | None = None
    worker_id: str | None = None
    wait: float | None = None
    result: Any = None
    stuck_for: float | None = None


OUTCOMES = (
    "enqueued",
    "started",
    "succeeded",
    "retry-scheduled",
    "failed-terminal",
    "cancelled",
    "reclaimed",
    "lease-lost",
)


class LifecycleObserver(Protocol):
    """Receives every lifecycle transition; exceptions it raises are logged and contained.

    An observer may also define ``on_error(self, e: WorkerError) -> None``
    (:class:`ErrorObserver`): a worker then reports its system errors to it, each once per
    incident (see :class:`WorkerError`). Observers without it are unaffected.
    """

    def on_transition(self, t: Transition) -> None:
        """Called after each transition of a job."""


class TransitionCounter(Protocol):
    """An observer that only counts: a worker calls ``count_transition`` instead of
    ``on_transition`` when an observer has it, and builds no :class:`Transition` for it.
    An observer that also has ``count_transitions`` (:class:`BatchTransitionCounter`) gets
    that one call per batch instead."""

    def count_transition(
        self, job_type: str, outcome: str, duration: float | None, wait: float | None
    ) -> None:
        """Called after each transition of a job a worker reports."""


class BatchTransitionCounter(Protocol):
    """A counting observer taking a batch of transitions to one outcome in one call
    (``golemq_pg.metrics.PrometheusObserver`` is one): the jobs of a unit that started, the
    outcomes of one completion write."""

    def count_transitions(
        self, outcome: str, counted: Sequence[tuple[str, float | None]]
    ) -> None:
        """One transition to ``outcome`` per ``(type, seconds)`` of ``counted``: ``seconds``
        is the due-to-start wait on ``"started"``, the handler's run time on the outcome of
        an attempt, None when neither is known."""


#: What failed in a worker: its claim loop (or a transactional handler's claim), the
#: completion writes, the lease renewer, the LISTEN connection, the schedules task, the
#: other maintenance tasks; or a transactional handler's transaction that stayed open past
#: its ``transaction_warning``.
WorkerErrorKind = Literal[
    "claim", "complete", "renew", "listen", "schedule", "maintenance", "transaction-slow"
]


@dataclass(frozen=True, slots=True)
class WorkerError:
    """A system error of a worker (not a job's outcome), given to observers' ``on_error``.

    ``kind``: a :data:`WorkerErrorKind`; ``error``: bounded text, the exception's type and
    the first line of its message (never a payload); ``worker_id``: the worker's lease
    owner; ``at``: when it was seen (an aware UTC datetime, the worker's clock).

    A failing service reports once per incident: its first failure after a healthy period;
    its repeats while it keeps failing do not, and a failure within a second of its
    recovery (its first success) continues the same incident. A ``"transaction-slow"``
    error is reported once per attempt.
    """

    kind: WorkerErrorKind
    error: str
    worker_id: str
    at: datetime


class ErrorObserver(Protocol):
    """An observer that also receives a worker's system errors (:class:`WorkerError`);
    exceptions it raises are logged and contained."""

    def on_error(self, e: WorkerError) -> None:
        """Called once per incident of a worker's service failing (and once per slow
        transaction)."""


P = TypeVar("P", bound=Mapping[str, Any])


class JobType(Generic[P]):
    """A typed declaration of a job type: ``JobType("article.extract", ExtractPayload)``.

    The payload type parameter lets mypy check ``queue.add(ArticleExtract, {...})`` and
    handler signatures; at run time only ``name``, ``grouped`` and ``max_attempts`` matter.

    ``max_attempts``: the attempt budget of this type's jobs when ``add``, ``add_many`` or
    ``schedule`` is not given one (a positive int, :data:`UNLIMITED`, or None: the
    enqueuer's default); checked here (``ValueError`` naming the field).
    """

    __slots__ = ("grouped", "max_attempts", "name", "payload_type")

    def __init__(
        self,
        name: str,
        payload_type: type[P] | None = None,
        *,
        grouped: bool = False,
        max_attempts: MaxAttempts = None,
    ) -> None:
        self.name = name
        self.payload_type = payload_type
        self.grouped = grouped
        if max_attempts is not None:
            check_attempt_budget(max_attempts, "max_attempts")
        self.max_attempts: MaxAttempts = max_attempts

    def __repr__(self) -> str:
        return f"JobType({self.name!r}, grouped={self.grouped})"


def type_name(job_type: str | JobType[Any]) -> str:
    """The plain string name of a job type given as a string or a :class:`JobType`."""
    return job_type.name if isinstance(job_type, JobType) else job_type
