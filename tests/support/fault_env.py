"""A fault scenario's environment: :class:`FaultEnv` (fixture ``fault_env`` in
tests/plugins/faults.py).

* a migrated schema with an effects ledger and an audit trigger, a producer-side
  store/Queue, and :meth:`FaultEnv.spawn` to start real worker processes
  (tests/support/worker_process.py with the ``fault`` ledger) whose connections carry a
  per-test ``application_name`` prefix, so the test can find (and terminate) exactly its own
  backends;
* :meth:`FaultEnv.check_invariants`: docs/RELIABILITY.md's I1-I5 in SQL, plus the ledger.

Around it, in their own modules: tests/support/server_control.py (a throwaway cluster of
the suite's own, to restart / stop / start), tests/support/outage_proxy.py (an outage for
this test's workers only), tests/support/fault_report.py (a scenario's measurements).

The ledger (``effects``): one row per handler run, ``(job_id, attempt, token, worker, pid)``
written when the handler starts (``token`` is the lease token the row carried at that
moment) and completed with ``outcome`` / ``reason`` when it returns. The audit trigger records
every status change and lease write with the writer's ``application_name``, which is the
worker id (= ``lease_owner``) for a worker's queue connections: I2 is checked on it.
"""

from __future__ import annotations

import signal
import subprocess
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from golemq_pg import PostgresStore, Queue
from tests.support.conninfo import quote_value
from tests.support.workers import WorkerProc, start_process, worker_config

LEDGER_DDL = """
CREATE TABLE {s}.effects (
    run_id      bigserial PRIMARY KEY,
    job_id      bigint NOT NULL,
    attempt     int NOT NULL,
    token       bigint,
    worker      text NOT NULL,
    pid         int NOT NULL,
    type        text,
    scope       text,
    tag         text,
    started_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at timestamptz,
    outcome     text,
    reason      text
);
CREATE INDEX ON {s}.effects (job_id);
CREATE TABLE {s}.audit (
    seq          bigserial PRIMARY KEY,
    at           timestamptz NOT NULL DEFAULT clock_timestamp(),
    stmt_at      timestamptz NOT NULL DEFAULT statement_timestamp(),
    app          text,
    op           text NOT NULL,
    job_id       bigint NOT NULL,
    old_status   text,
    new_status   text,
    old_owner    text,
    new_owner    text,
    old_token    bigint,
    new_token    bigint,
    old_expired  boolean,
    new_error    text,
    old_attempts int,
    new_attempts int,
    type         text,
    scope        text,
    dedupe_key   text,
    xact         bigint NOT NULL DEFAULT txid_current()
);
CREATE INDEX ON {s}.audit (job_id, old_token);
CREATE FUNCTION {s}.audit_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    kind text := 'update';
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO {s}.audit (app, op, job_id, old_status, old_owner, old_token,
                               old_expired, old_attempts, type, scope, dedupe_key)
        VALUES (current_setting('application_name'), 'delete', OLD.id, OLD.status,
                OLD.lease_owner, OLD.lease_token, OLD.lease_expires_at < now(), OLD.attempts,
                OLD.type, OLD.scope_type || ':' || OLD.scope_id, OLD.dedupe_key);
        RETURN OLD;
    END IF;
    IF OLD.status = NEW.status AND NEW.status <> 'running' THEN
        RETURN NEW;  -- a pending row edited in place (replace), nothing lease-related
    END IF;
    IF OLD.status = 'running' AND NEW.status = 'running' AND OLD.lease_token = NEW.lease_token
    THEN
        IF OLD.lease_expires_at IS NOT DISTINCT FROM NEW.lease_expires_at THEN
            kind := 'progress';
        ELSE
            kind := 'renew';
        END IF;
    END IF;
    INSERT INTO {s}.audit (app, op, job_id, old_status, new_status, old_owner, new_owner,
                           old_token, new_token, old_expired, new_error, old_attempts,
                           new_attempts, type, scope, dedupe_key)
    VALUES (current_setting('application_name'), kind, NEW.id, OLD.status, NEW.status,
            OLD.lease_owner, NEW.lease_owner, OLD.lease_token, NEW.lease_token,
            OLD.lease_expires_at < now(), NEW.last_error, OLD.attempts, NEW.attempts,
            NEW.type, NEW.scope_type || ':' || NEW.scope_id, NEW.dedupe_key);
    RETURN NEW;
END
$$;
CREATE TRIGGER audit_jobs AFTER UPDATE OR DELETE ON {s}.jobs
    FOR EACH ROW EXECUTE FUNCTION {s}.audit_jobs();
-- A finished job moves into the history (migration 0008): the DELETE from jobs its statement
-- made is audited as the UPDATE to a finished status it stands for (the same writer, the
-- old lease, the new status), so every check below reads one kind of row.
CREATE FUNCTION {s}.audit_finished() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE {s}.audit a
       SET op = 'update', new_status = NEW.status, new_owner = NEW.lease_owner,
           new_token = NEW.lease_token, new_error = NEW.last_error,
           new_attempts = NEW.attempts
     WHERE a.seq = (SELECT max(b.seq) FROM {s}.audit b
                     WHERE b.job_id = NEW.id AND b.op = 'delete'
                       AND b.xact = txid_current());
    RETURN NEW;
END
$$;
CREATE TRIGGER audit_finished AFTER INSERT ON {s}.jobs_history
    FOR EACH ROW EXECUTE FUNCTION {s}.audit_finished();
-- A job that finished and is live again (a dead letter retried, or a bug): audited as the
-- UPDATE from its finished status it stands for.
CREATE FUNCTION {s}.audit_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    finished text;
BEGIN
    SELECT a.new_status INTO finished FROM {s}.audit a
     WHERE a.job_id = NEW.id AND a.new_status IN ('succeeded', 'failed')
     ORDER BY a.seq DESC LIMIT 1;
    IF finished IS NOT NULL THEN
        INSERT INTO {s}.audit (app, op, job_id, old_status, new_status, new_owner, new_token,
                               new_error, new_attempts, type, scope, dedupe_key)
        VALUES (current_setting('application_name'), 'update', NEW.id, finished, NEW.status,
                NEW.lease_owner, NEW.lease_token, NEW.last_error, NEW.attempts, NEW.type,
                NEW.scope_type || ':' || NEW.scope_id, NEW.dedupe_key);
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER audit_inserted AFTER INSERT ON {s}.jobs
    FOR EACH ROW EXECUTE FUNCTION {s}.audit_inserted();
"""


# -- worker processes ---------------------------------------------------------------------------


# -- the environment ----------------------------------------------------------------------------


@dataclass
class FaultEnv:
    """One test's queue, ledger, audit, producer and worker processes."""

    dsn: str
    schema: str
    tmp: Path
    prefix: str
    store: PostgresStore
    queue: Queue
    procs: list[WorkerProc] = field(default_factory=list)
    roles: list[str] = field(default_factory=list)

    # -- sql -------------------------------------------------------------------------------
    def connect(self, **kwargs: Any) -> psycopg.Connection[Any]:
        """A fresh autocommit connection tagged as this test's (admin) connection."""
        options = {"autocommit": True, "application_name": self.prefix + "-admin", **kwargs}
        return psycopg.connect(self.dsn, **options)

    def q(self, query: str, params: Any = None) -> list[tuple[Any, ...]]:
        """Run ``query`` (``{s}`` is this schema) on a fresh connection; rows or []."""
        with self.connect() as conn:
            cur = conn.execute(sql.SQL(query).format(s=sql.Identifier(self.schema)), params)
            return cur.fetchall() if cur.description else []

    def one(self, query: str, params: Any = None) -> Any:
        return self.q(query, params)[0][0]

    def db_now(self) -> Any:
        return self.one("SELECT clock_timestamp()")

    def status_counts(self) -> dict[str, int]:
        return {s: int(n) for s, n in self.q(
            "SELECT status, count(*) FROM {s}.jobs_all GROUP BY status")}

    def succeeded(self) -> int:
        """How many jobs have succeeded; -1 while the server cannot be read (an outage)."""
        try:
            return int(self.one("SELECT count(*) FROM {s}.jobs_all WHERE status = 'succeeded'"))
        except psycopg.Error:
            return -1

    def stuck_report(self, procs: Sequence[WorkerProc], what: str) -> str:
        """What the workers were doing when a wait after a fault ran out: the job counts,
        each worker's last log lines and its threads' stacks."""
        try:
            counts: object = self.status_counts()
        except psycopg.Error as exc:
            counts = f"unreadable: {type(exc).__name__}"
        parts = [f"{what} (jobs: {counts})"]
        for proc in procs:
            tail = "\n".join(proc.log_text().splitlines()[-15:])
            parts.append(f"--- {proc.worker_id} alive={proc.alive()}\n{tail}\n"
                         f"{proc.dump_stacks()}")
        return "\n".join(parts)

    def effects(self) -> list[tuple[Any, ...]]:
        """(job_id, attempt, token, worker, pid, started_at, finished_at, outcome, reason)."""
        return self.q(
            "SELECT job_id, attempt, token, worker, pid, started_at, finished_at, outcome, "
            "reason FROM {s}.effects ORDER BY run_id"
        )

    # -- workers ---------------------------------------------------------------------------
    def worker_id(self, name: str) -> str:
        return f"{self.prefix}-{name}"

    def spawn(
        self,
        name: str,
        types: Sequence[dict[str, Any]],
        *,
        worker: dict[str, Any] | None = None,
        pool: dict[str, Any] | None = None,
        mode: str = "run",
        hooks: dict[str, Any] | None = None,
        dsn: str | None = None,
        ledger_dsn: str | None = None,
        wait_ready: bool = True,
        wrap: Sequence[str] = (),
    ) -> WorkerProc:
        """Start a worker process serving ``types`` (:func:`tests.support.workers.type_spec`
        entries; every type runs the ``fault`` handler of tests/support/worker_process.py, an
        ``async def`` one for an entry with ``async_handler=True``).
        ``pool``: the store's ``max_size``, ``*_timeout``, ``extra_options``, ``ledger_size``.
        ``wrap``: a command prefix (a network namespace: tests/support/partition.py).
        """
        worker_id = self.worker_id(name)
        log_path = self.tmp / f"{name}.log"
        options = {"poll_interval": 0.1, "base_backoff": 0, "max_backoff": 0,
                   "lease_grace": 5, "shutdown_grace": 5, "abandon_grace": 1}
        options.update(worker or {})
        handlers = [
            {"type": spec["name"], "ledger": "fault", "async": bool(spec.get("async_handler")),
             "options": {k: v for k, v in spec.items() if k not in ("name", "async_handler")}}
            for spec in types
        ]
        config = worker_config(
            dsn or self.dsn, self.schema, worker_id, ledger_dsn=ledger_dsn or self.dsn,
            logs={"path": str(log_path)}, worker=options, store=pool or {"max_size": 5},
            handlers=handlers, mode=mode, hooks=hooks or {}, ready="when_running",
        )
        popen = start_process(config, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              wrap=wrap)
        proc = WorkerProc(worker_id, popen, log_path)
        self.procs.append(proc)
        if wait_ready:
            assert popen.stdout is not None
            line = popen.stdout.readline()
            if line.strip() != "ready":
                rest = line + (popen.stdout.read() if popen.poll() is not None else "")
                raise AssertionError(f"worker {name} did not start: {rest}\n{proc.log_text()}")
        return proc

    def backends(self, app: str, *, listen: bool | None = None) -> list[int]:
        """Backend pids whose application_name is exactly ``app`` (LISTEN ones or not)."""
        rows = self.q(
            "SELECT pid, query FROM pg_stat_activity WHERE application_name = %s", (app,))
        pids = []
        for pid, query in rows:
            is_listen = (query or "").lstrip().upper().startswith("LISTEN")
            if listen is None or listen == is_listen:
                pids.append(int(pid))
        return pids

    def terminate_backends(self, app: str, *, listen: bool | None = None) -> int:
        """pg_terminate_backend on ``app``'s connections; returns how many were ended."""
        pids = self.backends(app, listen=listen)
        with self.connect() as conn:
            for pid in pids:
                conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        return len(pids)

    # -- roles -----------------------------------------------------------------------------
    def create_role(self, suffix: str, *, grant_all: bool = True) -> str:
        """A LOGIN role for this test (dropped at teardown); optionally with full DML on the
        schema's tables, sequences and functions (what a worker needs)."""
        role = f"{self.prefix}_{suffix}".replace("-", "_")
        ident = sql.Identifier(role)
        schema = sql.Identifier(self.schema)
        with self.connect() as conn:
            conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(ident))
            self.roles.append(role)
            if grant_all:
                for stmt in (
                    "GRANT USAGE ON SCHEMA {s} TO {r}",
                    "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {s} TO {r}",
                    "GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {s} TO {r}",
                    "GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {s} TO {r}",
                ):
                    conn.execute(sql.SQL(stmt).format(s=schema, r=ident))
        return role

    def role_dsn(self, role: str) -> str:
        info = conninfo_to_dict(self.dsn)
        info["user"] = role
        info.pop("password", None)
        return " ".join(f"{k}={quote_value(str(v))}" for k, v in info.items())

    # -- invariants ------------------------------------------------------------------------
    def check_invariants(
        self,
        *,
        expected: int | None = None,
        reaper_interval: float = 1.0,
        terminal: bool = True,
        allow_double_runs: bool = False,
        allow_revive: bool = False,
        ledger: bool = True,
        slack: float = 2.0,
    ) -> dict[str, int]:
        """Assert I1-I5 (see docs/RELIABILITY.md); returns counts worth reporting.

        ``expected``: how many rows must exist (cancelled/pruned jobs excluded by the
        caller). ``terminal``: every job must be finished (the scenario drained the queue).
        ``reaper_interval``: I3's bound (plus ``slack`` for a loaded 2-core machine).
        ``ledger``: also check the effects ledger (off when no handler ran the jobs).
        """
        rows = self.q(
            "SELECT id, status, attempts, max_attempts, lease_expires_at, "
            "lease_expires_at < now() - make_interval(secs => %s) FROM {s}.jobs_all",
            (reaper_interval + slack,),
        )
        # I1: nothing lost, nothing stuck.
        if expected is not None:
            assert len(rows) == expected, f"I1: {len(rows)} job rows, expected {expected}"
        if terminal:
            live = [r for r in rows if r[1] not in ("succeeded", "failed")]
            assert not live, f"I1: {len(live)} jobs not finished, e.g. {live[:5]}"
        else:
            stuck = [r for r in rows if r[1] == "running" and r[5]]
            assert not stuck, f"I1: running jobs with no live lease: {stuck[:5]}"
        # I3: no RUNNING row whose lease expired more than one reaper interval ago.
        expired = [r for r in rows if r[1] == "running" and r[5]]
        assert not expired, f"I3: {len(expired)} running rows with a long-expired lease"
        # I4: attempts within budget.
        over = [r for r in rows if r[2] > r[3]]
        assert not over, f"I4: attempts > max_attempts: {over[:5]}"
        # I2: every lease write by the holder of the current lease (audit trigger).
        self._check_audit(allow_revive=allow_revive)
        runs = self._check_ledger(allow_double_runs=allow_double_runs) if ledger else {}
        # I5: no idle-in-transaction connection, no advisory lock held by an idle one.
        self.check_connections()
        counts = self.status_counts()
        return {"jobs": len(rows), **counts, **runs}

    def _check_audit(self, *, allow_revive: bool) -> None:
        bad_claims = self.q(
            "SELECT job_id, app, new_owner FROM {s}.audit WHERE op = 'update' "
            "AND old_status = 'pending' AND new_status = 'running' "
            "AND new_owner IS DISTINCT FROM app AND app NOT LIKE %s",
            (self.prefix + "-admin%",),
        )
        assert not bad_claims, f"I2: claims written for another owner: {bad_claims[:5]}"
        # A write to a RUNNING row by someone other than its holder is only allowed as a
        # reaper recovery of an expired lease.
        foreign = self.q(
            "SELECT job_id, app, old_owner, old_status, new_status, new_error, old_expired "
            "FROM {s}.audit WHERE op <> 'delete' AND old_status = 'running' "
            "AND app IS DISTINCT FROM old_owner AND NOT (old_expired "
            "AND new_status IN ('pending', 'failed') AND new_error LIKE 'LeaseExpired%%')"
        )
        assert not foreign, f"I2: lease writes by a non-holder: {foreign[:5]}"
        renewed_late = self.q(
            "SELECT job_id, app FROM {s}.audit WHERE op = 'renew' AND old_expired"
        )
        assert not renewed_late, f"I2: expired leases renewed: {renewed_late[:5]}"
        twice = self.q(
            "SELECT job_id, count(*) FROM {s}.audit WHERE new_status = 'succeeded' "
            "AND old_status = 'running' GROUP BY job_id HAVING count(*) > 1"
        )
        assert not twice, f"I2: jobs completed twice: {twice[:5]}"
        if not allow_revive:
            revived = self.q(
                "SELECT job_id, app, old_status, new_status FROM {s}.audit WHERE op = 'update'"
                " AND old_status IN ('succeeded', 'failed') AND new_status <> old_status"
            )
            assert not revived, f"finished jobs revived: {revived[:5]}"

    def _check_ledger(self, *, allow_double_runs: bool) -> dict[str, int]:
        same_lease = self.q(
            "SELECT job_id, token, count(*) FROM {s}.effects WHERE token IS NOT NULL "
            "GROUP BY job_id, token HAVING count(*) > 1"
        )
        assert not same_lease, f"I2: one lease ran twice: {same_lease[:5]}"
        runs = self.one("SELECT count(*) FROM {s}.effects")
        extra = self.one(
            "SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM {s}.effects "
            "GROUP BY job_id) x"
        )
        doubles = self.q(
            "SELECT job_id, count(*) FROM {s}.effects WHERE outcome = 'ok' AND reason IS NULL "
            "GROUP BY job_id HAVING count(*) > 1"
        )
        if not allow_double_runs:
            assert not doubles, f"I2: jobs with two successful effects: {doubles[:5]}"
        # A job that succeeded was run by the holder of its final lease.
        unrun = self.q(
            "SELECT j.id FROM {s}.jobs_all j WHERE j.status = 'succeeded' AND NOT EXISTS ("
            "SELECT 1 FROM {s}.effects e WHERE e.job_id = j.id AND e.token = j.lease_token)"
        )
        assert not unrun, f"I2: succeeded jobs with no run under their final lease: {unrun[:5]}"
        # I4 as the handlers saw it: no run whose attempt number is past its job's budget.
        over_budget = self.q(
            "SELECT e.job_id, e.attempt, j.max_attempts FROM {s}.effects e "
            "JOIN {s}.jobs_all j ON j.id = e.job_id WHERE e.attempt > j.max_attempts"
        )
        assert not over_budget, f"I4: runs past the attempt budget: {over_budget[:5]}"
        return {"runs": int(runs), "extra_runs": int(extra), "double_effects": len(doubles)}

    def check_connections(self, *, idle_for: float = 1.0, settle: float = 15.0) -> None:
        """I5 over every backend of this test (application_name prefix): no transaction
        *left* idle, and no advisory lock held by an idle connection.

        A transaction seen idle for more than ``idle_for`` seconds fails the check unless it
        moves on within ``settle`` seconds (the same backend and transaction start, no
        longer idle): after a healed partition a transaction can wait seconds for TCP's
        backed-off retransmissions and then commit, which is not one left behind. One that
        is left idle stays so, until the store's 60 s
        ``idle_in_transaction_session_timeout``, far past ``settle``.
        """
        like = self.prefix + "%"
        idle_tx = (
            "SELECT pid, xact_start, application_name, now() - state_change, "
            "left(query, 80) FROM pg_stat_activity "
            "WHERE application_name LIKE %s AND state LIKE 'idle in transaction%%' "
            "AND state_change < now() - make_interval(secs => %s)"
        )
        locks = (
            "SELECT DISTINCT a.pid, a.xact_start, a.application_name, a.state "
            "FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
            "WHERE l.locktype = 'advisory' AND a.application_name LIKE %s "
            "AND a.state LIKE 'idle%%' AND a.state_change < now() - make_interval(secs => %s)"
        )
        for query, what in ((idle_tx, "connections idle in transaction"),
                            (locks, "advisory locks held by idle connections")):
            seen = self.q(query, (like, idle_for))
            deadline = time.monotonic() + settle
            while seen and time.monotonic() < deadline:
                time.sleep(0.2)
                now = {(r[0], r[1]) for r in self.q(query, (like, 0.0))}
                seen = [r for r in seen if (r[0], r[1]) in now]
            assert not seen, f"I5: {what} for more than {settle} s: {seen}"

    def lease_overlaps(self, where: str, *, directed: bool = False) -> int:
        """Pairs of leases (a, b) whose RUNNING intervals overlapped and match ``where``.

        Intervals come from the audit trigger: from the claim that set a token to the write
        that ended it (complete, retry, fail, release, reaper, cancel), on the database
        clock. ``directed``: only pairs where ``b`` was claimed while ``a`` ran.
        """
        query = (
            "WITH claims AS (SELECT job_id, new_token AS token, at AS t0, type, scope, "
            "dedupe_key FROM {s}.audit WHERE old_status = 'pending' AND new_status = 'running'"
            "), ends AS (SELECT job_id, old_token AS token, min(at) AS t1 FROM {s}.audit "
            "WHERE old_status = 'running' AND (op = 'delete' OR new_status <> 'running') "
            "GROUP BY job_id, old_token), leases AS (SELECT c.*, coalesce(e.t1, 'infinity') "
            "AS t1 FROM claims c LEFT JOIN ends e USING (job_id, token)) "
            "SELECT count(*) FROM leases a JOIN leases b ON (a.job_id, a.token) <> "
            "(b.job_id, b.token) AND a.t0 <= b.t0 AND b.t0 < a.t1 WHERE "
        )
        if not directed:
            # Each overlapping pair once: b is the later claim.
            query += "(a.t0 < b.t0 OR a.job_id < b.job_id) AND "
        return int(self.one(query + where))

    # -- teardown --------------------------------------------------------------------------
    def close(self) -> None:
        for proc in self.procs:
            if proc.stopped:
                proc.signal(signal.SIGCONT)
            if proc.alive():
                proc.kill()
            if proc.popen.stdout is not None:
                proc.popen.stdout.close()
        self.store.close()
        try:
            with self.connect() as conn:
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name LIKE %s AND pid <> pg_backend_pid()",
                    (self.prefix + "%",),
                )
                for role in self.roles:
                    conn.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE usename = %s", (role,))
                    ident = sql.Identifier(role)
                    conn.execute(sql.SQL("DROP OWNED BY {}").format(ident))
                    conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(ident))
        except psycopg.Error:
            pass  # the server may be down after a failed restart scenario


def make_env(
    dsn: str, schema: str, tmp: Path, *, audit: bool = True, store_size: int = 6
) -> FaultEnv:
    """Migrate ``schema``, add the ledger (and audit trigger), open the producer store."""
    prefix = "gqf" + uuid.uuid4().hex[:8]
    store = PostgresStore.connect(
        dsn, schema=schema, min_size=1, max_size=store_size, application_name=prefix + "-admin"
    )
    store.migrate()
    ddl = LEDGER_DDL if audit else LEDGER_DDL.split("CREATE TABLE {s}.audit", maxsplit=1)[0]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL(ddl).format(s=sql.Identifier(schema)))
    return FaultEnv(dsn=dsn, schema=schema, tmp=tmp, prefix=prefix, store=store,
                    queue=Queue(store))


# -- a TCP proxy: an outage for this test's workers only -----------------------------------------


# -- server control ------------------------------------------------------------------------------
