"""The storage port: the domain verbs the Queue and the Worker use, and their parameters.

Only the stores implement these. ``PostgresStore`` is the only code that issues SQL;
``InMemoryStore`` implements the same verbs with the same semantics (guards included) for
tests. Every lease write (complete, retry, fail, release, renew, progress) is fenced on
``(id, lease_owner, lease_token, status = 'running')`` and returns what it actually changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol, runtime_checkable

from golemq_pg._types import (
    JobStatus,
    JobSummary,
    ParentFailurePolicy,
    PausedType,
    Resource,
    ScheduleSummary,
    Scope,
    WorkerSummary,
    WorkflowSummary,
)
from golemq_pg.store.dashboard import DashboardReads

# -- texts every store writes alike ----------------------------------------------------------
# The reaper stores these as a recovered job's ``last_error`` (both stores: PostgresStore
# sends them to ``lease_recover_expired`` as parameters), and the worker reports the same
# text to observers; defined here once so the stores and the worker cannot drift apart.

#: ``last_error`` of a job whose lease expired and that goes back to PENDING (``reclaimed``).
LEASE_EXPIRED_ERROR = "LeaseExpired: lease expired before the job finished (worker lost)"
#: ``last_error`` of a job whose lease expired with no attempt left (``failed-terminal``).
LEASE_EXHAUSTED_ERROR = "LeaseExpired: attempts exhausted after lease expiry"
#: A schedule's ``max_attempts`` when it has no budget of its own (stored as 0 in
#: ``schedules.max_attempts``, where NULL is unlimited as in ``jobs``): each job a tick enqueues
#: takes the default of whoever enqueues it (the firing worker's ``default_max_attempts``).
NO_BUDGET = 0
#: ``last_error`` of a RUNNING job ``queue.requeue_stale`` sent back to PENDING.
LEASE_STALE_ERROR = "LeaseStale: requeued, its lease unwritten for longer than older_than"
#: ``last_error`` of a job ``queue.requeue_stale`` took back with no attempt left.
LEASE_STALE_EXHAUSTED_ERROR = "LeaseStale: attempts exhausted after requeue_stale"
#: What a dead letter of the reaper (or of ``requeue_stale``) on a job's last attempt puts
#: between the text above and the previous handler error it keeps in ``last_error``.
PREVIOUS_ERROR_SEPARATOR = "; previous error: "
#: The longest previous handler error kept there (an error text's own bound).
PREVIOUS_ERROR_LIMIT = 300
#: How many failed attempts a job's history keeps (``JobSummary.errors``), newest kept.
HISTORY_LIMIT = 20

#: The statuses ``job_wait`` returns on: a job in one of them has finished.
TERMINAL_STATUSES = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED})


class WriteRefused(Exception):  # noqa: N818 - named after what happened
    """A fenced batch write refused for its data, not for the connection: the database (or
    the client encoding the parameters) will refuse the same items again, so running the
    write again cannot help. Raised by the batch writes the worker makes (complete, retry,
    fail, release, renew, mark started); the worker then splits the batch until it finds the
    item refused and dead-letters that one alone. ``str()`` is the refusing error's class
    and the first line of its message, never an item's content; the error itself is the
    ``__cause__``. Any other exception of those writes is taken for a connection (or
    server) problem and the write retried whole."""


def wait_missing(job_id: str) -> LookupError:
    """What ``job_wait`` raises for a job that does not exist or was deleted while waited for
    (the same text from both stores)."""
    return LookupError(
        f"job {job_id} does not exist (never added, or cancelled, pruned or deleted)"
    )


def wait_timed_out(job_id: str, timeout: float) -> TimeoutError:
    """What ``job_wait`` raises when ``timeout`` seconds pass before the job finishes."""
    return TimeoutError(f"job {job_id} did not finish within {timeout:g} seconds")


@dataclass(frozen=True, slots=True)
class EnqueueParams:
    """One job to insert. ``payload`` is already validated and JSON-encoded."""

    type: str
    payload: bytes
    scope: Scope | None = None
    dedupe_key: str | None = None
    on_duplicate: Literal["reject", "replace"] = "reject"
    run_at: datetime | None = None  # absolute due time; None => now() + delay
    delay: float = 0.0  # seconds from the database clock's now()
    max_attempts: int | None = 3  # None: unlimited (stored as NULL)
    priority: int = 0
    tags: tuple[str, ...] | None = None  # validated; None: no tags
    #: The producer span's W3C trace context (``traceparent``, ``tracestate``) when
    #: ``golemq_pg.tracing`` is instrumented; stored apart from the payload. None: none.
    trace_context: Mapping[str, str] | None = None
    #: The add named a grouped JobType: a replace moves the job to the end of its group
    #: (its created_at becomes the replacing add's arrival); otherwise it keeps its place.
    grouped: bool = False
    #: Ids of the jobs it waits for (checked, distinct; empty: none). See
    #: :meth:`JobStore.job_enqueue` for what the store does with them.
    depends_on: tuple[str, ...] = ()
    #: What a failed or cancelled parent does to it: "fail" | "cancel" | "run".
    on_parent_failure: ParentFailurePolicy = "fail"


@dataclass(frozen=True, slots=True)
class EnqueueManyParams:
    """Many jobs of one type; payloads already validated and encoded."""

    type: str
    payloads: Sequence[bytes]
    scope: Scope | None = None
    run_at: datetime | None = None
    delay: float = 0.0
    max_attempts: int | None = 3  # None: unlimited (stored as NULL)
    priority: int = 0
    tags: tuple[str, ...] | None = None  # the same tags on every job; None: no tags
    #: One producer span's trace context for every job of the call (see EnqueueParams).
    trace_context: Mapping[str, str] | None = None
    #: As :attr:`EnqueueParams.depends_on`: every job of the call waits for these parents.
    depends_on: tuple[str, ...] = ()
    #: As :attr:`EnqueueParams.on_parent_failure`, for every job of the call.
    on_parent_failure: ParentFailurePolicy = "fail"


#: ``last_error`` of a child dead-lettered by the "fail" policy (both stores):
#: ``PARENT_FAILED_ERROR.format(parent=<parent id>)``.
PARENT_FAILED_ERROR = "parent {parent} failed"
#: The same when the parent was cancelled (deleted while live) rather than dead-lettered.
PARENT_CANCELLED_ERROR = "parent {parent} was cancelled"


@dataclass(frozen=True, slots=True)
class WorkflowJobParams:
    """One job of a workflow: its parameters (``depends_on`` may name jobs outside the
    workflow, which must exist) and ``after``: the indexes of earlier jobs of the same
    workflow it waits for (each smaller than its own index)."""

    job: EnqueueParams
    after: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class WorkflowParams:
    """``workflow_create``: a workflow's label and its jobs, parents before children."""

    name: str
    jobs: Sequence[WorkflowJobParams]


@dataclass(frozen=True, slots=True)
class WorkflowCreated:
    """What ``workflow_create`` wrote: the workflow's id and each job's id, by index."""

    id: str
    job_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class JobLinks:
    """A job's place in the dependency graph (``job_links``).

    ``workflow_id``: the workflow it belongs to, or None. ``parents``: the jobs it waits or
    waited for that still exist (live or finished), each as ``job_get`` returns it, by id.
    ``children``: the ids of the jobs that wait or waited for it, by id (cancelled ones are
    gone, and absent).
    """

    workflow_id: str | None = None
    parents: tuple[JobSummary, ...] = ()
    children: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    """What ``job_enqueue`` did: the id, and whether a row was inserted or replaced."""

    id: str | None
    inserted: bool
    replaced: bool = False


#: A grouped claim holds a group while a retried job of it waits out its backoff; it looks
#: for one among the group's first this-many pending jobs in arrival (id) order, where a
#: failed batch's jobs are (both stores).
GROUP_HOLD_DEPTH = 64


@dataclass(frozen=True, slots=True)
class TypeSlots:
    """One handler type as the claim sees it: free slots, lease and guards."""

    type: str
    limit: int  # most jobs (or groups, for grouped types) to claim now
    lease_seconds: float
    serialize_by_scope: bool = False
    not_while_running: tuple[str, ...] = ()
    waits_for: tuple[str, ...] = ()
    grouped: bool = False
    max_batch: int | None = None

    @property
    def guarded(self) -> bool:
        """Whether claiming this type needs the serialised (advisory-locked) path."""
        return bool(
            self.serialize_by_scope or self.not_while_running or self.waits_for or self.grouped
        )


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """Claim up to ``sum(limit)`` due jobs across ``types`` for ``owner``.

    ``defer_start``: the claimed jobs' handlers do not start now (a worker's buffer): their
    ``started_at`` stays None, so they are reported PENDING, until ``job_mark_started`` or
    the write that finishes them records when their handler started. Otherwise the claim is
    the start.
    """

    owner: str
    types: Sequence[TypeSlots]
    resources: Mapping[str, Resource] = field(default_factory=dict)
    defer_start: bool = False


#: The value objects built once per job on the drain's hot path (this one, ResultRef and
#: ClaimedJob) are not ``frozen``: a frozen dataclass sets each field through
#: ``object.__setattr__`` (3.2 us for ClaimedJob's twelve fields against 0.5 us, measured
#: with timeit). ``unsafe_hash`` keeps them hashable. Treat them as read-only.
@dataclass(slots=True, unsafe_hash=True)
class LeaseRef:
    """Identifies one held lease: the job id and the fencing token of the claim."""

    id: str
    token: int


@dataclass(slots=True, unsafe_hash=True)
class ResultRef(LeaseRef):
    """A held lease to complete with the handler's result: ``result`` is its JSON encoding,
    already validated (JSON-safe, at most 1 MiB: ``_validation.encode_result``), or None."""

    result: bytes | None = None


@dataclass(slots=True, unsafe_hash=True)
class ClaimedJob(LeaseRef):
    """A job leased to a worker. ``token`` (also ``lease_token``) fences every later write.

    It is its own :class:`LeaseRef`, so the worker completes a job by handing the job itself
    to ``job_complete_many``: no second object per job.
    """

    type: str
    payload: dict[str, Any]
    scope: Scope | None
    attempt: int
    max_attempts: int | None  # None: unlimited
    priority: int
    enqueued_at: datetime
    lease_expires_at: datetime
    #: The trace context stored by the add (the JSON object as decoded; None: the add was not
    #: traced). Read only by ``golemq_pg.tracing``, which checks its shape.
    trace_context: Any = None
    #: Seconds from the job's due time (``run_at``) to this claim, by the store's clock
    #: (``golemq_job_wait_seconds``); 0 when it was claimed the moment it became due.
    waited: float = 0.0

    @property
    def lease_token(self) -> int:
        """The fencing token of this claim (the same as ``token``)."""
        return self.token


@dataclass(frozen=True, slots=True)
class ClaimBlock:
    """Why a guarded type that had due work got nothing in a claim.

    ``kind`` is "type" (a ``not_while_running`` / ``waits_for`` type holds a live lease or
    due work; ``name`` is that type), "scope" (every due job's scope or group already has a
    live lease), "pool concurrency" or "pool rate" (``name`` is the resource pool).
    """

    kind: Literal["type", "scope", "pool concurrency", "pool rate"]
    name: str | None = None

    def __str__(self) -> str:
        return self.kind if self.name is None else f"{self.kind} {self.name}"


class ClaimBatch(list[ClaimedJob]):
    """Optional richer result of ``job_claim``: the claimed jobs (it *is* the list) plus
    ``blocked``, type name -> :class:`ClaimBlock`, for guarded types that had due work but
    got nothing. Stores may return a plain list; read it with :func:`claim_blocked`."""

    __slots__ = ("blocked",)

    def __init__(
        self, jobs: Iterable[ClaimedJob] = (), blocked: Mapping[str, ClaimBlock] | None = None
    ) -> None:
        super().__init__(jobs)
        self.blocked: dict[str, ClaimBlock] = dict(blocked or {})


def claim_blocked(claimed: Sequence[ClaimedJob]) -> Mapping[str, ClaimBlock]:
    """The ``blocked`` map of a ``job_claim`` result ({} when the store reports none)."""
    return claimed.blocked if isinstance(claimed, ClaimBatch) else {}


@dataclass(frozen=True, slots=True)
class CompleteAndClaimParams:
    """``job_complete_and_claim``: complete ``items`` (as ``job_complete_many`` with
    ``delete_types`` would) and claim up to ``claim.limit`` jobs of ``claim.type`` for the
    same ``owner``, honouring ``resources``, in one transaction."""

    owner: str
    items: Sequence[LeaseRef]
    claim: TypeSlots
    resources: Mapping[str, Resource] = field(default_factory=dict)
    delete_types: Sequence[str] = ()
    #: As ``job_complete_many``'s ``started``.
    started: Sequence[float | None] | None = None
    #: As :attr:`ClaimRequest.defer_start`, for the claim.
    defer_start: bool = False


@dataclass(frozen=True, slots=True)
class CompleteAndClaimResult:
    """What ``job_complete_and_claim`` did: the ids completed (or deleted) and the jobs it
    leased (a :class:`ClaimBatch` whose ``blocked`` says why the type got nothing)."""

    written: set[str]
    claimed: list[ClaimedJob]


@dataclass(frozen=True, slots=True)
class RetryItem:
    """Put a running job back to PENDING after ``delay`` seconds (database clock)."""

    id: str
    token: int
    delay: float
    error: str | None
    consume_attempt: bool = True
    #: The attempt's formatted traceback (``_errortext.traceback_text``), kept in its history
    #: entry; the store bounds it again (``bounded_traceback``). None: nothing was raised.
    traceback: str | None = None


@dataclass(frozen=True, slots=True)
class FailItem:
    """Dead-letter a running job (FAILED) with its last error."""

    id: str
    token: int
    error: str | None
    #: As :attr:`RetryItem.traceback`.
    traceback: str | None = None


@dataclass(frozen=True, slots=True)
class Reclaimed:
    """A job whose lease expired and that the reaper recovered."""

    id: str
    type: str
    scope: Scope | None
    attempts: int
    outcome: Literal["reclaimed", "failed-terminal"]
    lease_owner: str | None
    #: Seconds from the last write of the lease (its claim or renewal) to its recovery.
    stuck_for: float | None = None
    #: The ``last_error`` written (a dead letter's keeps the previous handler error).
    error: str | None = None


@dataclass(frozen=True, slots=True)
class CancelFilter:
    """Which jobs to cancel. Exactly one selector family is used."""

    job_ids: Sequence[str] = ()
    scope: Scope | None = None
    type: str | None = None
    dedupe_keys: Sequence[str] = ()
    pending_only: bool = False


@dataclass(frozen=True, slots=True)
class CancelledJob:
    """A deleted job; ``lease_owner`` is set when it was running (to be aborted)."""

    id: str
    type: str
    scope: Scope | None
    was_running: bool
    lease_owner: str | None
    attempts: int


@dataclass(frozen=True, slots=True)
class FindParams:
    """Filters for ``job_find`` and ``job_retry_failed``."""

    types: Sequence[str] | None = None
    statuses: Sequence[JobStatus] | None = None
    scope_type: str | None = None
    scope_id: str | None = None
    limit: int | None = 100
    skip: int = 0
    #: Jobs carrying every one of these tags (``job_find`` only); None: no tag filter.
    tags: Sequence[str] | None = None


#: A registered worker is "lost" once its heartbeat is older than this many of its intervals.
LOST_AFTER_BEATS = 3
#: Rows of lost workers whose last heartbeat is older than this (seconds) are swept.
LOST_SWEEP_SECONDS = 3600.0


@dataclass(frozen=True, slots=True)
class HistoryUpkeep:
    """What one ``history_upkeep`` call did."""

    #: History partitions created (PostgreSQL: one per status and day).
    created: int = 0
    #: Count deltas folded into the maintained counts.
    folded: int = 0
    #: Finished rows of an older release moved out of the live table.
    moved: int = 0


@dataclass(frozen=True, slots=True)
class StepSweep:
    """What one ``job_step_sweep`` pass did: the orphaned steps it removed, and the job id
    the next pass starts after (None: the walk reached the end and starts over)."""

    removed: int = 0
    after: str | None = None


@dataclass(frozen=True, slots=True)
class WorkerBeat:
    """One worker's registry row as it writes it: at start, then every heartbeat."""

    worker_id: str
    host: str
    pid: int
    handlers: Mapping[str, int]  # type -> concurrency
    heartbeat_seconds: float
    running: int = 0  # jobs held (buffered or running)
    state: Literal["running", "stopping"] = "running"


@dataclass(frozen=True, slots=True)
class TypeGauges:
    """One job type's queue state as the metrics collector exports it at scrape time.

    Counts are exact up to the ``cap`` passed to ``metrics_type_gauges`` and ``cap`` above
    it: ``pending`` is due now, ``scheduled`` due later (retry backoff included),
    ``waiting`` waits for its parents.
    ``oldest_due_age``: seconds the oldest due job of the type has waited (None: none due).
    """

    type: str
    pending: int
    scheduled: int
    running: int
    failed: int
    oldest_due_age: float | None
    paused: bool
    #: WAITING jobs (parents not all finished), capped like the others.
    waiting: int = 0


@dataclass(frozen=True, slots=True)
class ScheduleParams:
    """A recurring schedule to create or update (keyed)."""

    key: str
    type: str
    payload: bytes
    cron: str | None
    every_seconds: float | None
    timezone: str
    repeat_from: Literal["finished", "run_at"]
    first_run_at: datetime | None  # None => now (interval) ; cron passes the next tick
    scope: Scope | None = None
    priority: int = 0
    #: The budget of each job a tick enqueues: an int, None (unlimited) or
    #: :data:`NO_BUDGET` (none of its own: each job gets the default of whoever enqueues it,
    #: the firing worker's ``default_max_attempts`` or, for ``schedule_run_now``, the
    #: queue's).
    max_attempts: int | None = NO_BUDGET


@dataclass(frozen=True, slots=True)
class DueSchedule:
    """A schedule whose tick is due, handed to the scheduler to compute the next tick."""

    key: str
    type: str
    cron: str | None
    every_seconds: float | None
    timezone: str
    repeat_from: str
    next_run_at: datetime


#: Given a due schedule and the database's now(), the next run time (None: wait for finish).
NextTick = Callable[[DueSchedule, datetime], datetime | None]


@dataclass(frozen=True, slots=True)
class Notification:
    """A wake-up hint: ``kind`` is "jobs" (payload: type names), "cancel" (job ids) or
    "done" (the ids of jobs that became terminal or were deleted by ``delete_on``, one
    notification per completing statement; an empty ``items`` means "re-check").

    A listener also says when its connection was lost, once per loss ("lost": ``items``
    holds the error's bounded text, its type and first line, never a payload) and when it
    is back ("reconnected": re-check everything)."""

    kind: Literal["jobs", "cancel", "done", "reconnected", "lost"]
    items: tuple[str, ...]


class Listener(Protocol):
    """A source of wake-up hints for one worker."""

    def wait(self, timeout: float) -> list[Notification]:
        """Block up to ``timeout`` seconds; return what arrived (maybe nothing)."""

    def close(self) -> None:
        """Stop listening and release the connection."""


@runtime_checkable
class JobStore(DashboardReads, Protocol):
    """The storage port. See the module docstring for the fencing rule (the dashboard's
    verbs are in :mod:`golemq_pg.store.dashboard`).

    Dependencies (both stores). A WAITING job is never claimed, never due (not in
    ``job_oldest_due_age``, ``job_run_now*``, ``pending`` or ``scheduled``), holds its
    dedupe key, and is counted as ``waiting``. Every write that finishes a job (the
    completion verbs, ``job_complete_and_claim``, a transactional completion, the fail
    verbs, the reaper's dead letter, ``job_cancel`` / ``workflow_cancel``, a superseded
    keyed retry's delete) applies the outcome to the job's WAITING children in the same
    transaction, atomically with it:

    * SUCCEEDED: the parent is done for each child; a child left with no open parent is
      released: PENDING, ``run_at = max(run_at, now)``, ``updated_at`` now, and idle
      workers are woken as by an add (a "jobs" hint naming its type). A child with a
      failed parent recorded (see below) gets its policy instead, once none is open.
    * FAILED or deleted while live (cancelled): a failure. The child's policy: "fail"
      dead-letters it (FAILED, ``last_error`` :data:`PARENT_FAILED_ERROR` /
      :data:`PARENT_CANCELLED_ERROR` naming this parent, attempts unchanged, no attempt
      added to its history; a "done" hint names it); "cancel" deletes it (its own
      WAITING children then see a cancelled parent); "run" records the parent as failed
      and treats it as done (released when no parent is left open). A dead letter or
      cancel of the child applies to its children likewise: the policy propagates.

    A job that has children WAITING is never deleted by ``delete_on`` (``delete_types``
    of the completion, fail and reaper verbs): it goes to the history as without it.
    """

    # -- producer -------------------------------------------------------------------------
    def job_enqueue(self, params: EnqueueParams, *, connection: Any = None) -> EnqueueResult:
        """Insert one job, applying the dedupe rule; with ``connection``, inside it.

        Dependencies (``params.depends_on`` not empty; see "Dependencies" below): every
        parent must exist, live or finished, else ``ValueError("depends_on: job N does not
        exist")`` and nothing is written (nor is a duplicate looked for). A dedupe key is
        held by a WAITING job as by a PENDING one: a ``reject`` add of a held key writes
        nothing (id None, as for any duplicate); a ``replace`` add whose key a WAITING job
        holds replaces that job's payload, tags and options and keeps it WAITING for its
        own parents (the new ``depends_on`` is then ignored: ``replaced=True``). A
        replacing add with parents of a key held by a PENDING job replaces it as ever and
        ignores ``depends_on`` likewise.

        Dependencies, the rule of both stores. At insert, each parent counts as *done*
        when SUCCEEDED, *failed* when FAILED, *open* otherwise (WAITING, PENDING, RUNNING).
        With an open parent the job is WAITING (``run_at`` kept: it is due at
        ``greatest(run_at, release time)``). With none open and no failed one it is
        PENDING as without parents. With a failed one (FAILED now), its policy applies
        at once, open parents or not: "fail" inserts it FAILED (``last_error``
        :data:`PARENT_FAILED_ERROR` of the lowest failed parent id, attempts 0, no
        history entry), "cancel" writes nothing of it and returns
        ``EnqueueResult(id=<its id>, inserted=True)``: the id of a job cancelled at once
        (``job_get`` returns None), "run" counts the failed parent as done (PENDING
        unless a parent is open). Every edge is kept (``job_links``) and the parents are
        marked, so finishing them releases (or fails) it.
        """

    def job_enqueue_many(self, params: EnqueueManyParams, *, connection: Any = None) -> int:
        """Insert many jobs of one type (COPY on PostgreSQL); returns the count.

        With ``params.depends_on``: each job as :meth:`job_enqueue` would insert it with
        the same parents (unknown parent: ``ValueError`` before anything is written; the
        count includes jobs the "cancel" policy dropped at once).
        """

    def workflow_create(
        self, params: WorkflowParams, *, connection: Any = None
    ) -> WorkflowCreated:
        """Insert a workflow record (``name``, ``created_at`` = the store's now) and every
        job of it in one transaction (with ``connection``: inside the caller's, never
        committing), in index order, each as :meth:`job_enqueue` inserts it with parents
        ``job.depends_on`` plus the jobs at its ``after`` indexes, and linked to the
        workflow (``job_links(id).workflow_id``). Any failure writes nothing: an unknown
        ``depends_on`` id raises ``ValueError`` naming it; a job rejected as a duplicate
        (``on_duplicate="reject"`` and its key held) raises ``ValueError("workflow job N
        (type T) is a duplicate of a live job")`` where N is its index. A ``replace`` job
        whose key a live job holds replaces that job, which then belongs to the workflow
        (and keeps its own parents). An ``after`` index not smaller than the job's own:
        ``ValueError``. Returns the workflow id and the job ids by index."""

    def workflow_create_many(
        self, params: Sequence[WorkflowParams], *, connection: Any = None
    ) -> list[WorkflowCreated]:
        """:meth:`workflow_create` of each workflow, in order, all in one transaction (with
        ``connection``: inside the caller's, never committing): every workflow written or
        none. Returns what each wrote, in order; ``[]`` for no workflows. A workflow
        without jobs, or an ``after`` index not smaller than the job's own, raises
        ``ValueError`` naming the workflow's position (``workflow N``) before any write."""

    def workflow_get(self, workflow_id: str) -> WorkflowSummary | None:
        """A workflow (see :class:`~golemq_pg.WorkflowSummary`), or None when unknown
        (never created, or pruned). ``status``: "cancelled" once ``workflow_cancel`` ran;
        else "running" while any of its jobs is WAITING, PENDING or RUNNING; else "failed"
        when any is FAILED; else "succeeded". ``finished_at``: None while running; else the
        cancel time, or the newest ``finished_at`` of its jobs (``created_at`` when none is
        left). ``jobs``: those still existing, by id; ``edges``: every dependency recorded
        between two jobs of the workflow, as ``(parent id, child id)`` sorted (numerically),
        including edges whose jobs were since deleted."""

    def workflow_cancel(self, workflow_id: str) -> list[CancelledJob]:
        """Cancel every live job (WAITING, PENDING, RUNNING) of the workflow, as
        ``job_cancel`` does (running ones announced to their workers), and mark it
        cancelled (once: a second call marks nothing new). The dependents of a cancelled
        job inside the workflow are cancelled with it; those outside it get their policy
        applied as for any cancelled parent. Returns the jobs deleted; an unknown id
        returns []."""

    def job_links(self, job_id: str) -> JobLinks:
        """The job's workflow, parents and children (:class:`JobLinks`); an empty
        ``JobLinks()`` for a job without any, or an unknown id. One read."""

    def job_parents_many(self, job_ids: Sequence[str]) -> dict[str, JobLinks]:
        """The workflow and parents of each of ``job_ids`` that has any, by id, in one read
        (``children`` are not read: empty): what ``job.parents`` of every job of a claim
        batch needs. A job without parents or a workflow, or an unknown id, is absent."""

    # -- consumer -------------------------------------------------------------------------
    def job_claim(self, request: ClaimRequest) -> list[ClaimedJob]:
        """Lease up to the requested number of due jobs, honouring every guard."""

    def job_complete_many(
        self, owner: str, items: Sequence[LeaseRef], *, delete_types: Sequence[str] = (),
        started: Sequence[float | None] | None = None,
    ) -> set[str]:
        """RUNNING -> SUCCEEDED for leases still held; returns the ids written.

        An item that is a :class:`ResultRef` with a result stores it as the job's result.
        Held jobs of a type in ``delete_types`` are deleted instead (``delete_on``), in the
        same statement. The ids written either way are announced with one "done" hint.
        ``started``: per item, how many seconds before the store's now its handler started
        (None: unknown), written as ``started_at`` where the row has none yet (a claim with
        ``defer_start``); the same holds for the retry and fail verbs.
        """

    def job_complete_and_claim(self, params: CompleteAndClaimParams) -> CompleteAndClaimResult:
        """``job_complete_many`` and then ``job_claim`` of one type, in one transaction.

        The completions are fenced and written exactly as ``job_complete_many`` writes them
        (a lost lease is not written, hence not in ``written``); the claim runs after them,
        so the capacity they free in a resource pool counts as free. The claim honours every
        guard (advisory locks in the guarded claim's order on PostgreSQL) and pause. When
        the transaction fails nothing is written and nothing is claimed.
        """

    def job_retry_many(
        self, owner: str, items: Sequence[RetryItem], *,
        started: Sequence[float | None] | None = None,
    ) -> set[str]:
        """RUNNING -> PENDING after a delay (attempt refunded unless consumed); each attempt
        is appended to the job's history (the newest :data:`HISTORY_LIMIT` kept), with its
        traceback bounded to its last 16 KiB (``_errortext.bounded_traceback``)."""

    def job_fail_many(
        self, owner: str, items: Sequence[FailItem], *, delete_types: Sequence[str] = (),
        started: Sequence[float | None] | None = None,
    ) -> set[str]:
        """RUNNING -> FAILED (dead letter), the attempt appended to the history (with its
        bounded traceback, as in :meth:`job_retry_many`); jobs of a type in ``delete_types``
        are deleted instead. One "done" hint names the ids."""

    def job_release_many(self, owner: str, items: Sequence[LeaseRef]) -> set[str]:
        """RUNNING -> PENDING, due now, attempt refunded (claimed but never started)."""

    def job_mark_started(
        self, owner: str, items: Sequence[LeaseRef], started: Sequence[float]
    ) -> set[str]:
        """Record when the handlers of these held jobs started (``started``: per item,
        seconds before the store's now) where a row has no start yet (a claim with
        ``defer_start``): from then on it is reported RUNNING. Returns the ids written."""

    def lease_renew(self, owner: str, items: Sequence[LeaseRef], seconds: float) -> set[str]:
        """Extend the given held leases to now() + seconds; returns the ids renewed."""

    def lease_recover_expired(
        self, limit: int = 500, delete_types: Sequence[str] = ()
    ) -> list[Reclaimed]:
        """Reaper: expired RUNNING leases go back to PENDING, or FAILED past their budget;
        either way the attempt is appended to the history (``worker_id`` None), and the
        dead-lettered ids are announced with one "done" hint. A dead-lettered job of a type
        in ``delete_types`` (``delete_on="always"``) is deleted instead, still reported as
        ``failed-terminal``. A job with an unlimited budget (``max_attempts`` None) is never
        exhausted. A dead letter's ``last_error`` keeps the previous handler error after
        :data:`PREVIOUS_ERROR_SEPARATOR` (cut to :data:`PREVIOUS_ERROR_LIMIT`)."""

    def lease_requeue_stale(
        self, older_than: float, types: Sequence[str] | None, limit: int = 500
    ) -> list[Reclaimed]:
        """``queue.requeue_stale``: what the reaper does to an expired lease, done to RUNNING
        jobs (of ``types``; None: every type) whose lease was last written (claimed or
        renewed) at least ``older_than`` seconds ago, expired or not, at most ``limit`` of
        them (texts :data:`LEASE_STALE_ERROR` / :data:`LEASE_STALE_EXHAUSTED_ERROR`). The
        old holder's lease is void: its late completion, failure or renewal is refused."""

    def lease_held(self, owner: str, items: Sequence[LeaseRef]) -> set[str]:
        """Which of these leases this owner still holds (the reconcile pass)."""

    def job_progress(self, owner: str, item: LeaseRef, progress: float | dict[str, Any]) -> bool:
        """Persist progress for a held lease."""

    # -- inspection and administration -----------------------------------------------------
    def job_get(self, job_id: str) -> JobSummary | None:
        """One job, or None."""

    def job_find(self, params: FindParams) -> list[JobSummary]:
        """Jobs matching the filters, newest first."""

    def job_wait(self, job_id: str, timeout: float | None) -> JobSummary:
        """Block until the job is terminal (SUCCEEDED or FAILED) and return its summary.

        ``timeout``: seconds (None: no limit; 0: look once). Raises :func:`wait_timed_out`'s
        ``TimeoutError`` past it, and :func:`wait_missing`'s ``LookupError`` when the job
        does not exist or is deleted (cancelled, pruned, deleted on completion) while waited
        for. Woken by the store's own change signals, never a busy loop; on PostgreSQL every
        waiting thread of a store shares one LISTEN connection and holds no pooled one.
        """

    def job_count_by_status(self) -> dict[JobStatus, int]:
        """Counts of every status (0 when none), WAITING included."""

    def job_stats(self) -> dict[str, int]:
        """pending (due now), scheduled (future), running, succeeded, failed, waiting
        (parents not all finished: neither pending nor scheduled)."""

    def job_stats_by_type(self) -> dict[str, dict[str, int]]:
        """``job_stats`` buckets per job type (types with no rows are absent)."""

    def job_oldest_due_age(self) -> float | None:
        """Seconds since the oldest due PENDING job became due; None when nothing is due."""

    def job_cancel(self, selector: CancelFilter, reason: str | None) -> list[CancelledJob]:
        """Delete matching jobs; announce running ones to their workers. WAITING jobs
        match as PENDING ones do (``pending_only`` included). A cancelled parent is a
        failure for its WAITING children: their policy applies in the same transaction
        (:meth:`job_enqueue`, "Dependencies"); the children it cancels or fails are not
        in the returned list."""

    def job_retry_failed(self, params: FindParams) -> int:
        """FAILED -> PENDING with attempts reset; ``params.limit=None`` means all. Each job
        revived is put back in the graph as :meth:`job_retry` does (its failed dependents
        re-armed, itself WAITING while a parent is unfinished), without ``job_retry``'s
        refusal: a job with a FAILED parent is revived WAITING (the parent counts as open).
        The count includes the dependents re-armed."""

    def job_prune(
        self, statuses: Sequence[JobStatus], *, before: datetime | None, age: float | None,
        limit: int | None = None,
    ) -> int:
        """Delete finished rows older than the cut-off (``before`` or ``age`` seconds).

        A finished job with a child still WAITING is kept (the child reads its result).
        Then the graph of jobs gone: a workflow created before the cut-off none of whose
        jobs exists any more (cancelled, pruned, deleted) is removed (``workflow_get``
        returns None), and so are the node rows and edges of jobs that no longer exist
        outside a remaining workflow (a workflow's edges stay while its record does). The
        count returned is of jobs only."""

    def job_payload(self, job_id: str) -> bytes | None:
        """One job's payload as its JSON encoding, or None when the job does not exist."""

    def history_upkeep(self, days_ahead: int = 3, legacy_limit: int = 5_000) -> HistoryUpkeep:
        """Keep the store's history in shape (run by the maintenance service): storage for
        finished jobs made ``days_ahead`` days ahead, counters brought up to date, up to
        ``legacy_limit`` finished jobs an older release left among the live ones moved out.
        Idempotent and safe from any number of workers; a store without such upkeep does
        nothing."""

    # -- worker registry ----------------------------------------------------------------------
    def worker_heartbeat(self, beat: WorkerBeat) -> int:
        """Register or refresh ``beat.worker_id`` (``last_seen_at`` = the store's now; a
        first beat also sets ``started_at``) and sweep lost workers' rows last seen more than
        :data:`LOST_SWEEP_SECONDS` ago, in one statement; returns how many were swept."""

    def worker_remove(self, worker_id: str) -> bool:
        """Drop a worker's row (its clean stop); True when it existed."""

    def worker_list(self) -> list[WorkerSummary]:
        """Every registered worker, by id; ``state`` is "lost" when its heartbeat is older
        than :data:`LOST_AFTER_BEATS` of its intervals (the store's clock, at read time)."""

    # -- control of single jobs and of types ------------------------------------------------
    def type_pause(self, job_type: str, reason: str | None) -> PausedType:
        """Pause a type: no claim path leases its jobs until ``type_resume`` (checked by
        the claim itself). Pausing again replaces the reason and keeps ``paused_at``."""

    def type_resume(self, job_type: str) -> bool:
        """Resume a type and wake idle workers (a jobs hint); False when not paused."""

    def type_paused(self) -> dict[str, PausedType]:
        """Every paused type, by name."""

    def job_retry(self, job_id: str, reset_steps: bool = False) -> bool:
        """One FAILED job -> PENDING due now, attempts 0, last_error cleared, history kept;
        fenced on ``status = 'failed'``: False and nothing changed otherwise.

        Dependencies: a job that has parents and failed *because of* a parent (its "fail"
        policy) goes back to WAITING instead, if no parent of it is FAILED or gone (deleted
        while it was not SUCCEEDED: cancelled) now, and is released at once when all its
        parents are SUCCEEDED; with a parent still FAILED (or gone), False, nothing
        changed. Retrying a job (FAILED -> PENDING) re-arms its dependents: each FAILED
        child that failed because of it (transitively, down the chain) goes back to
        WAITING, ``last_error`` cleared, attempts 0, and waits for its parents again.

        Its durable steps are kept (a later attempt reads them back) unless
        ``reset_steps``: then they are deleted in the same transaction as the revival."""

    def job_run_now(self, job_id: str) -> bool:
        """One PENDING job with a future ``run_at`` -> due now; fenced on that state: False
        and nothing changed otherwise."""

    def job_run_now_types(self, types: Sequence[str]) -> int:
        """Every PENDING job of ``types`` with a future ``run_at`` -> due now, paused types
        excepted; returns how many (``run_until_empty(with_scheduled=True)``)."""

    def job_delete(self, job_id: str) -> bool:
        """Delete one finished job (SUCCEEDED or FAILED) with its result and history; the
        maintained counts stay exact. False, and nothing changed, when the job is live
        (PENDING, RUNNING: ``job_cancel`` deletes those) or unknown."""

    # -- schedules --------------------------------------------------------------------------
    def schedule_upsert(self, params: ScheduleParams) -> None:
        """Create or update a schedule by key."""

    def schedule_delete(self, key: str) -> bool:
        """Remove a schedule; True when it existed."""

    def schedule_list(self) -> list[ScheduleSummary]:
        """Every schedule, by key."""

    def schedule_fire_due(
        self, next_tick: NextTick, limit: int = 100, default_max_attempts: int | None = 3
    ) -> list[str]:
        """Enqueue one job per due schedule and advance it; returns the new job ids.
        Paused schedules are skipped. A schedule without a budget of its own
        (:data:`NO_BUDGET`) gives its job ``default_max_attempts`` (None: unlimited)."""

    def schedule_pause(self, key: str) -> bool:
        """Pause a schedule: ``schedule_fire_due`` fires none of its ticks until
        ``schedule_resume``. Pausing a paused one changes nothing. False: unknown key."""

    def schedule_resume(self, key: str, next_tick: NextTick) -> bool:
        """Resume a paused schedule (False: unknown key; a schedule not paused is left as
        it is). With the row locked, a pending tick that passed during the pause becomes
        ``next_tick(schedule, now)`` (``_schedule.resumed_tick``: the first tick after now);
        a future tick, or none (waiting for its last job), is kept."""

    def schedule_run_now(self, key: str, default_max_attempts: int | None = 3) -> str | None:
        """Enqueue one job of the schedule now, as a tick would (paused or not), keeping its
        cadence; a ``repeat_from="finished"`` schedule then waits for this job to finish.
        A schedule without a budget of its own gives the job ``default_max_attempts``.
        Returns the job's id; None for an unknown key."""

    # -- metrics ----------------------------------------------------------------------------
    def metrics_type_gauges(self, cap: int) -> list[TypeGauges]:
        """Per job type, by name: backlog, running and failed counts (each at most ``cap``),
        oldest due age, paused. A type appears when it has such rows, is paused, or a live
        worker handles it. One bounded read: its cost grows with the number of types and
        priorities and with ``cap``, never with the rows kept (the succeeded history)."""

    # -- plumbing ---------------------------------------------------------------------------
    def now(self) -> datetime:
        """The store's clock (the database's now() on PostgreSQL)."""

    def open_listener(self, dsn: str | None = None) -> Listener | None:
        """A wake-up source for a worker, or None when the store has none. ``dsn``: where a
        database store connects to LISTEN instead of its own DSN (a worker's ``listen_dsn``);
        a store without a database ignores it."""

    def close(self) -> None:
        """Release resources."""

    # -- durable steps (``job.step`` / ``job.astep``) -------------------------------------------
    def job_step_get(self, job_id: str) -> dict[str, Any]:
        """The stored steps of one job (live or finished), name -> decoded value; empty
        when it has none or does not exist."""

    def job_step_save(self, owner: str, item: LeaseRef, name: str, value_json: bytes) -> bool:
        """Store one step's value (``value_json``: its JSON encoding, already validated:
        JSON-safe, at most 1 MiB) under ``name`` for a held lease, fenced like every lease
        write. The first write of a name wins: a later one keeps the stored value. True
        when the lease is held (stored now, or kept); False, and nothing written, when it
        is not (a stale attempt)."""

    def job_step_sweep(self, after: str | None, limit: int = 1_000) -> StepSweep:
        """Remove the steps of jobs that are gone for good (cancelled, pruned, deleted),
        looking at the next ``limit`` job ids with steps after ``after`` (None: from the
        start); bounded by ``limit`` whatever the table holds. A store that keeps steps on
        the job itself has nothing to sweep."""


TransactionalClaim = AbstractContextManager[tuple[ClaimedJob, Any] | None]
"""What ``job_claim_transactional`` returns: a context manager yielding ``(job, connection)``
(the open claim transaction) or None when nothing is due."""


@runtime_checkable
class TransactionalJobStore(JobStore, Protocol):
    """Optional verbs of a store that can run transactional handlers (``PostgresStore``).

    A worker uses them only for handlers registered with ``transactional=True``; a store
    without them (``InMemoryStore``) refuses such handlers at registration.
    """

    def job_claim_transactional(self, request: ClaimRequest) -> TransactionalClaim:
        """Claim one job inside an open transaction; yield ``(job, connection)`` or None.

        The handler's writes on ``connection`` and the job's completion (through
        :meth:`with_connection`) commit with the claim. If the block raises, the writes made
        inside it roll back, the claim commits (the attempt counts) and the exception
        propagates, so the caller records the retry or failure with the ordinary verbs.
        """

    def with_connection(self, conn: Any) -> JobStore:
        """A store whose verbs run on ``conn`` (the caller's transaction), never committing."""

    def job_interrupt_transactional(self, conn: Any) -> None:
        """Cancel the statement running on ``conn`` (a connection yielded by
        :meth:`job_claim_transactional`), from any thread; a no-op when none is running.
        The worker calls it when a transactional handler times out or is aborted."""
