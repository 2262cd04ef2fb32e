"""docs/RELIABILITY.md, security, with real processes: a payload secret never reaches a worker's
logs (captured at DEBUG) or last_error, across success, failure, retry exhaustion and reaping
by another process after a SIGKILL."""

from __future__ import annotations

import signal
import uuid

import pytest

from tests.support.fault_env import FaultEnv
from tests.support.fault_report import report
from tests.support.waiting import wait_until
from tests.support.workers import type_spec

pytestmark = pytest.mark.faults

CANARY = "CANARY-" + uuid.uuid4().hex


def test_secrets_stay_out_of_worker_logs_across_a_crash(fault_env: FaultEnv) -> None:
    env = fault_env
    options = {"poll_interval": 0.05, "lease_grace": 1.0}
    rescuer = env.spawn("rescuer", [type_spec("secret", concurrency=4)], worker=options)
    rescuer.signal(signal.SIGSTOP)
    base = {"secret": CANARY, "nested": {"token": CANARY}}
    held = {"sleep": 60, "only_on": "victim"}
    env.queue.add("secret", {**base, **held, "case": "reclaimed-then-ok"})
    env.queue.add("secret", {**base, **held, "case": "reaped-dead"}, max_attempts=1)
    env.queue.add("secret", {**base, **held, "raise": "ValueError", "case": "exhausted"},
                  max_attempts=2)
    env.queue.add("secret", {**base, **held, "raise": "Terminal", "case": "terminal"})
    victim = env.spawn("victim", [type_spec("secret", concurrency=4)], worker=options)
    wait_until(lambda: env.one("SELECT count(*) FROM {s}.effects") == 4, timeout=20)
    victim.signal(signal.SIGKILL)
    victim.wait(10)
    rescuer.signal(signal.SIGCONT)
    env.queue.add("secret", {**base, "case": "plain-ok"})
    env.queue.add("secret", {**base, "raise": "RuntimeError", "case": "retried-then-failed"},
                  max_attempts=2)
    wait_until(lambda: sum(env.status_counts().values()) == 6 and not (
        {"pending", "running"} & set(env.status_counts())), timeout=30)
    assert rescuer.terminate() == 0
    counts = env.status_counts()
    assert counts == {"succeeded": 2, "failed": 4}
    text = rescuer.log_text() + victim.log_text()
    assert "jobs_reaped" in text
    assert "jobs_dead_lettered" in text
    assert '"level": "debug"' in text or '"level": "info"' in text
    assert CANARY not in text
    assert CANARY not in rescuer.output()
    errors = [e for (e,) in env.q("SELECT last_error FROM {s}.jobs_all")]
    assert len([e for e in errors if e]) >= 4
    assert not [e for e in errors if e and CANARY in e]
    # the attempts' stored tracebacks (formatted without locals) and the logs' lack of them
    traces = [t for (t,) in env.q("SELECT a->>'traceback' FROM {s}.jobs_all, "
                                  "jsonb_array_elements(errors) a")]
    assert [t for t in traces if t]
    assert not [t for t in traces if t and CANARY in t]
    assert "Traceback (most recent call last)" not in text
    report("secrets: canary in payloads vs worker logs (DEBUG) across a SIGKILL",
           log_lines=len(text.splitlines()), canary_found=0, **counts)
