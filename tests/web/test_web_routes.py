"""The dashboard's routes through httpx's ASGI transport against a real PostgreSQL store:
every page, the actions and what they change, and the 400/401/403/404/503 answers."""

from __future__ import annotations

import base64
import re
import socket
from collections.abc import Callable
from urllib.parse import quote, unquote

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from golemq_pg import UNLIMITED, JobStatus, PostgresStore, Queue, Workflow
from golemq_pg.store.port import FailItem, WorkerBeat
from golemq_pg.web import create_app
from tests.support.store_port import add, claim, slots
from tests.support.web_client import ORIGIN, Dashboard

HOSTILE = "<script>alert(1)</script>"


def _dead_letter(store: PostgresStore, job_type: str, error: str,
                 traceback: str | None = None) -> str:
    job_id = add(store, job_type, {"secret": "hunter2"})
    (job,) = claim(store, slots(job_type, limit=1))
    assert store.job_fail_many(
        "w1", [FailItem(job.id, job.lease_token, error, traceback)]) == {job_id}
    return job_id


def _status(store: PostgresStore, job_id: str) -> JobStatus | None:
    job = store.job_get(job_id)
    return None if job is None else job.status


# -- pages --------------------------------------------------------------------------------


def test_overview_shows_counts_by_type_throughput_workers_and_paused_types(
    dashboard: Dashboard, pg_store: PostgresStore, web_queue: Queue
) -> None:
    web_queue.add("mail.send", {})
    web_queue.add("mail.send", {}, delay=3600)
    _dead_letter(pg_store, "report.build", "ValueError: bad column")
    web_queue.pause("report.build", "deploying")
    pg_store.worker_heartbeat(WorkerBeat("w-1", "host-a", 42, {"mail.send": 4}, 5.0))
    page = dashboard.get("/")
    assert page.status_code == 200
    html = page.text
    assert 'data-type="mail.send"' in html
    assert 'data-type="report.build"' in html
    assert "deploying" in html
    assert '<span class="value" id="workers-alive">1</span>' in html
    assert "<svg" in html
    assert "1 failed" in html  # the throughput chart's caption counts the dead letter
    live = dashboard.get("/?fragment=live")
    assert live.status_code == 200
    assert "<html" not in live.text
    assert 'data-type="mail.send"' in live.text


def test_jobs_page_filters_by_type_and_pages_with_the_after_cursor(
    dashboard: Dashboard, web_queue: Queue
) -> None:
    mine = [web_queue.add("wanted", {}) for _ in range(55)]
    web_queue.add("other", {}, tags=["blue"])
    first = dashboard.get("/jobs", params={"type": "wanted"})
    assert first.status_code == 200
    assert f'data-id="{mine[-1]}"' in first.text
    assert f'data-id="{mine[4]}"' not in first.text  # 50 a page, newest first
    assert "other" not in first.text.split("<tbody>")[1]
    second = dashboard.get("/jobs", params={"type": "wanted", "after": mine[5]})
    assert [i for i in mine if f'data-id="{i}"' in second.text] == mine[:5]
    assert f"after={mine[5]}" in first.text  # the page links its next page
    tagged = dashboard.get("/jobs", params={"tag": "blue"})
    assert tagged.text.count('data-id="') == 1
    by_id = dashboard.get("/jobs", params={"id": mine[0]})
    assert by_id.text.count('data-id="') == 1


def test_job_page_shows_fields_history_and_only_the_actions_that_apply(
    dashboard: Dashboard, pg_store: PostgresStore, web_queue: Queue
) -> None:
    failed = _dead_letter(pg_store, "report.build", "ValueError: bad column")
    page = dashboard.get(f"/jobs/{failed}")
    assert page.status_code == 200
    assert 'id="job-status">failed<' in page.text
    assert "ValueError: bad column" in page.text
    assert 'id="retry"' in page.text
    assert 'id="cancel"' not in page.text
    later = web_queue.add("mail.send", {}, delay=3600)
    parked = dashboard.get(f"/jobs/{later}").text
    assert 'id="run-now"' in parked
    assert 'id="cancel"' in parked
    assert 'id="retry"' not in parked


def test_job_page_shows_each_attempts_traceback_escaped_and_collapsed(
    dashboard: Dashboard, pg_store: PostgresStore
) -> None:
    trace = ("Traceback (most recent call last):\n"
             '  File "/app/reports.py", line 7, in build_report_pdf\n'
             f"    raise ValueError({HOSTILE!r})\n"
             f"ValueError: {HOSTILE}\n")
    job_id = _dead_letter(pg_store, "report.build", "ValueError: x", trace)
    page = dashboard.get(f"/jobs/{job_id}")
    assert page.status_code == 200
    html = page.text
    assert "<script>alert" not in html
    assert '<details class="traceback"><summary>traceback</summary><pre class="traceback">' \
        in html
    assert "<details open" not in html  # collapsed by default
    assert "in build_report_pdf" in html
    assert "ValueError: &lt;script&gt;alert(1)&lt;/script&gt;\n</pre></details>" in html
    plain = _dead_letter(pg_store, "report.build", "ValueError: y")  # nothing raised: none
    assert "<details" not in dashboard.get(f"/jobs/{plain}").text


def test_payload_is_hidden_unless_show_payloads(
    make_dashboard: Callable[..., Dashboard], pg_store: PostgresStore
) -> None:
    job_id = _dead_letter(pg_store, "t", "E: x")
    assert "hunter2" not in make_dashboard().get(f"/jobs/{job_id}").text
    assert "hunter2" not in make_dashboard().get("/jobs").text
    assert "hunter2" not in make_dashboard().get("/failed").text
    shown = make_dashboard(show_payloads=True).get(f"/jobs/{job_id}").text
    assert "hunter2" in shown


def test_dead_letters_page_groups_by_type_and_error(
    dashboard: Dashboard, pg_store: PostgresStore
) -> None:
    for _ in range(3):
        _dead_letter(pg_store, "a", "Boom: one")
    newest = _dead_letter(pg_store, "a", "Boom: two")
    html = dashboard.get("/failed").text
    rows = html.split("<tbody>")[1].split("</tbody>")[0].split("<tr>")[1:]
    assert len(rows) == 2
    assert "Boom: one" in rows[0]
    assert "<td>3</td>" in rows[0]
    assert f"/jobs/{newest}" in rows[1]


def test_schedules_and_workers_pages_list_what_the_database_holds(
    dashboard: Dashboard, pg_store: PostgresStore, web_queue: Queue
) -> None:
    web_queue.schedule("nightly", "report.build", {}, cron="0 3 * * *")
    pg_store.worker_heartbeat(WorkerBeat("w-7", "host-b", 7, {"mail.send": 2}, 5.0))
    schedules = dashboard.get("/schedules")
    assert schedules.status_code == 200
    assert "nightly" in schedules.text
    assert "cron 0 3 * * *" in schedules.text
    workers = dashboard.get("/workers")
    assert workers.status_code == 200
    assert "w-7" in workers.text
    assert "mail.send\u00d72" in workers.text


def test_healthz_answers_ok_when_the_database_does(dashboard: Dashboard) -> None:
    answer = dashboard.get("/healthz")
    assert answer.status_code == 200
    assert answer.json()["status"] == "ok"


def test_metrics_serves_the_queue_collector_gauges(
    dashboard: Dashboard, web_queue: Queue
) -> None:
    web_queue.add("mail.send", {"to": "secret-canary@example.com"}, scope=("User", "u-991"))
    web_queue.pause("mail.send", reason="provider down")
    answer = dashboard.get("/metrics")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    text = answer.text
    assert 'golemq_queue_jobs{status="pending",type="mail.send"} 1.0' in text
    assert 'golemq_paused{type="mail.send"} 1.0' in text
    assert "golemq_workers" in text
    assert "secret-canary" not in text
    assert "u-991" not in text


def test_healthz_answers_503_when_the_database_does_not() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    store = PostgresStore.connect(
        f"postgresql://postgres@127.0.0.1:{port}/test?connect_timeout=1", min_size=1,
        max_size=1,
    )
    try:
        answer = Dashboard(create_app(store)).get("/healthz")
    finally:
        store.pool.close(timeout=0)
    assert answer.status_code == 503
    assert answer.json()["status"] == "unavailable"


def test_unknown_routes_and_jobs_answer_404(dashboard: Dashboard) -> None:
    assert dashboard.get("/jobs/987654321").status_code == 404
    assert dashboard.get("/jobs/not-a-number").status_code == 404
    assert dashboard.get("/no/such/page").status_code == 404


def test_bad_filters_answer_400_and_say_which(dashboard: Dashboard) -> None:
    answer = dashboard.get("/jobs", params={"status": "sleeping"})
    assert answer.status_code == 400
    assert "unknown job status" in answer.text
    assert dashboard.get("/jobs", params={"after": "x1"}).status_code == 400


# -- escaping -----------------------------------------------------------------------------


def test_hostile_type_names_errors_and_filters_are_escaped(
    dashboard: Dashboard, pg_store: PostgresStore, web_queue: Queue
) -> None:
    job_id = _dead_letter(pg_store, HOSTILE, f"ValueError: {HOSTILE}")
    web_queue.pause(HOSTILE, HOSTILE)
    pages = [
        dashboard.get("/"),
        dashboard.get("/jobs"),
        dashboard.get(f"/jobs/{job_id}"),
        dashboard.get("/failed"),
        dashboard.get("/workers"),
        dashboard.get("/jobs", params={"type": HOSTILE}),
        dashboard.get("/jobs", params={"tag": HOSTILE}),  # an invalid tag: the 400 page
        dashboard.post("/failed/retry", {"type": HOSTILE, "error": HOSTILE}),  # confirm page
        dashboard.get("/jobs", params={"q": HOSTILE}),
        dashboard.get("/jobs", params={"q": HOSTILE, "fragment": "rows"}),
        dashboard.get("/jobs", params={"notice": HOSTILE}),
        dashboard.post("/jobs/bulk", {"action": "cancel", "all": "1", "type": HOSTILE,
                                      "q": HOSTILE}),  # the confirmation page
    ]
    for answer in pages:
        assert "<script>alert" not in answer.text, answer.url
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in pages[3].text
    assert pages[6].status_code == 400
    assert 'class="notice"' not in pages[10].text  # a notice no action signed: not shown
    assert pages[11].status_code == 200


# -- actions ------------------------------------------------------------------------------


def test_retry_moves_a_dead_letter_back_and_redirects_to_the_page(
    dashboard: Dashboard, pg_store: PostgresStore
) -> None:
    job_id = _dead_letter(pg_store, "t", "E: x")
    answer = dashboard.post(f"/jobs/{job_id}/retry")
    assert answer.status_code == 303
    assert answer.headers["location"] == f"/jobs/{job_id}?notice=retried"
    assert _status(pg_store, job_id) is JobStatus.PENDING
    again = dashboard.post(f"/jobs/{job_id}/retry")
    assert again.headers["location"].endswith("notice=unchanged")
    page = dashboard.get(again.headers["location"])
    assert "Nothing changed" in page.text


def test_run_now_and_cancel_act_on_one_job(
    dashboard: Dashboard, pg_store: PostgresStore, web_queue: Queue
) -> None:
    later = web_queue.add("t", {}, delay=3600)
    answer = dashboard.post(f"/jobs/{later}/run-now", headers={"referer": f"{ORIGIN}/jobs?type=t"})
    assert answer.status_code == 303
    assert answer.headers["location"] == "/jobs?type=t&notice=run-now"
    job = pg_store.job_get(later)
    assert job is not None
    assert job.run_at <= pg_store.now()
    # A Referer path that a browser would read as another host is never a redirect target.
    again = dashboard.post(f"/jobs/{later}/run-now", headers={"referer": f"{ORIGIN}//evil.test/x"})
    assert again.headers["location"] == f"/jobs/{later}?notice=unchanged"
    ask = dashboard.post(f"/jobs/{later}/cancel")
    assert ask.status_code == 200  # the confirmation page: nothing cancelled yet
    assert 'name="confirm" value="1"' in ask.text
    assert pg_store.job_get(later) is not None
    answer = dashboard.post(f"/jobs/{later}/cancel", {"confirm": "1"})
    assert answer.status_code == 303
    assert answer.headers["location"].startswith(f"/jobs?notice=Job+{later}+cancelled.&ns=")
    assert pg_store.job_get(later) is None
    assert f"Job {later} cancelled." in dashboard.get(answer.headers["location"]).text
    gone = dashboard.post(f"/jobs/{later}/cancel", {"confirm": "1"},
                          headers={"referer": f"{ORIGIN}/jobs/{later}/cancel"})
    assert gone.headers["location"] == f"/jobs/{later}?notice=unchanged"


def test_a_notice_shows_only_when_an_action_composed_it(
    dashboard: Dashboard, web_queue: Queue
) -> None:
    """A link crafted elsewhere cannot put its text on a page: a composed notice carries the
    signature of the process that composed it; fixed ones are named by key."""
    later = web_queue.add("t", {}, delay=3600)
    done = dashboard.post(f"/jobs/{later}/cancel", {"confirm": "1"})
    signed = dashboard.get(done.headers["location"])
    assert f"Job {later} cancelled." in signed.text
    forged_text = "Your session expired: sign in again at evil.example"
    for params in ({"notice": forged_text},
                   {"notice": forged_text, "ns": "0" * 32},
                   {"notice": f"Job {later} cancelled.", "ns": "f" * 32}):
        page = dashboard.get("/jobs", params=params)
        assert page.status_code == 200
        assert 'class="notice"' not in page.text
    assert "The type is paused." in dashboard.get("/", params={"notice": "paused"}).text


def test_pause_and_resume_a_type(dashboard: Dashboard, pg_store: PostgresStore) -> None:
    answer = dashboard.post("/types/mail.send/pause", {"reason": "incident 42"})
    assert answer.status_code == 303
    assert pg_store.type_paused()["mail.send"].reason == "incident 42"
    assert dashboard.post("/types/mail.send/resume").status_code == 303
    assert pg_store.type_paused() == {}
    too_long = dashboard.post("/types/mail.send/pause", {"reason": "x" * 1001})
    assert too_long.status_code == 400
    assert pg_store.type_paused() == {}


def test_retry_all_matching_asks_for_confirmation_first(
    dashboard: Dashboard, pg_store: PostgresStore
) -> None:
    group = [_dead_letter(pg_store, "a", "Boom: one") for _ in range(3)]
    other = _dead_letter(pg_store, "a", "Boom: two")
    ask = dashboard.post("/failed/retry", {"type": "a", "error": "Boom: one"})
    assert ask.status_code == 200
    assert '<strong id="confirm-count">3</strong>' in ask.text
    assert all(_status(pg_store, i) is JobStatus.FAILED for i in group)  # nothing yet
    done = dashboard.post("/failed/retry", {"type": "a", "error": "Boom: one", "confirm": "yes"})
    assert done.status_code == 303
    assert done.headers["location"].startswith("/failed?notice=3+dead+letters+of+a+retried.&ns=")
    assert all(_status(pg_store, i) is JobStatus.PENDING for i in group)
    assert _status(pg_store, other) is JobStatus.FAILED
    assert dashboard.post("/failed/retry", {"error": "x"}).status_code == 400


def test_every_posted_field_that_cannot_be_stored_is_refused_naming_it(
    dashboard: Dashboard, pg_store: PostgresStore
) -> None:
    group = [_dead_letter(pg_store, "a", "Boom: one") for _ in range(2)]
    refusals = [
        ("/failed/retry", {"type": "a", "error": "Boom:\x00one", "confirm": "yes"}, "error"),
        ("/failed/retry", {"type": "a", "error": "x" * 10_001, "confirm": "yes"}, "error"),
        ("/failed/retry", {"type": "a\x00", "error": "Boom: one", "confirm": "yes"}, "type"),
        ("/failed/retry", {"type": "a", "error": "Boom: one", "confirm": "yes\x00"}, "confirm"),
        ("/types/a/pause", {"reason": "incident\x00 42"}, "reason"),
        (f"/jobs/{group[0]}/cancel", {"confirm": "1\x00"}, "confirm"),
    ]
    for path, form, field in refusals:
        body = "&".join(f"{k}={quote(v, safe='')}"
                        for k, v in form.items())
        answer = dashboard.request("POST", path, content=body.encode(), headers={
            "origin": ORIGIN, "content-type": "application/x-www-form-urlencoded"})
        assert answer.status_code == 400, (path, field)
        assert f"{field} must" in answer.text, (path, field)
    # A field posted twice is refused too (which of the two would the action mean?).
    twice = dashboard.request("POST", "/failed/retry", content=b"type=a&type=b&confirm=yes",
                              headers={"origin": ORIGIN,
                                       "content-type": "application/x-www-form-urlencoded"})
    assert twice.status_code == 400
    assert "type must be posted once" in twice.text
    assert all(_status(pg_store, i) is JobStatus.FAILED for i in group)
    assert pg_store.type_paused() == {}


def test_posts_from_another_origin_or_without_one_are_refused(
    dashboard: Dashboard, pg_store: PostgresStore
) -> None:
    job_id = _dead_letter(pg_store, "t", "E: x")
    assert dashboard.post(f"/jobs/{job_id}/retry", origin="http://evil.test").status_code == 403
    assert dashboard.post(f"/jobs/{job_id}/retry", origin="null").status_code == 403
    assert dashboard.post(f"/jobs/{job_id}/retry", origin=None).status_code == 403
    foreign = {"referer": "http://evil.test/jobs"}
    assert dashboard.post(f"/jobs/{job_id}/retry", origin=None, headers=foreign).status_code == 403
    assert dashboard.post("/types/t/pause", origin="https://localhost").status_code == 403
    assert _status(pg_store, job_id) is JobStatus.FAILED
    assert pg_store.type_paused() == {}
    own = {"referer": f"{ORIGIN}/jobs/{job_id}"}
    assert dashboard.post(f"/jobs/{job_id}/retry", origin=None, headers=own).status_code == 303
    assert dashboard.get(f"/jobs/{job_id}/retry").status_code == 405  # POST only


def test_read_only_refuses_every_action_with_403(
    make_dashboard: Callable[..., Dashboard], pg_store: PostgresStore
) -> None:
    dashboard = make_dashboard(read_only=True)
    job_id = _dead_letter(pg_store, "t", "E: x")
    for path in (f"/jobs/{job_id}/retry", f"/jobs/{job_id}/run-now", f"/jobs/{job_id}/cancel",
                 "/failed/retry", "/types/t/pause", "/types/t/resume"):
        assert dashboard.post(path, {"type": "t", "confirm": "yes"}).status_code == 403, path
    assert _status(pg_store, job_id) is JobStatus.FAILED
    assert pg_store.type_paused() == {}
    page = dashboard.get(f"/jobs/{job_id}").text
    assert 'id="retry"' not in page
    assert "read-only" in page


def test_basic_auth_guards_every_route_but_healthz(
    make_dashboard: Callable[..., Dashboard]
) -> None:
    dashboard = make_dashboard(basic_auth=("ops", "s3cret"))
    good = "Basic " + base64.b64encode(b"ops:s3cret").decode()
    bad = "Basic " + base64.b64encode(b"ops:wrong").decode()
    for path in ("/", "/jobs", "/failed", "/workers", "/schedules", "/static/app.css"):
        refused = dashboard.get(path)
        assert refused.status_code == 401, path
        assert refused.headers["www-authenticate"].startswith("Basic")
        assert dashboard.get(path, headers={"authorization": bad}).status_code == 401
        assert dashboard.get(path, headers={"authorization": good}).status_code == 200
    assert dashboard.post("/types/t/pause").status_code == 401
    assert dashboard.get("/healthz").status_code == 200


def test_pages_carry_a_strict_content_security_policy(dashboard: Dashboard) -> None:
    headers = dashboard.get("/").headers
    policy = headers["content-security-policy"]
    assert "script-src 'self';" in policy
    assert "default-src 'none'" in policy
    assert "unsafe-inline" not in policy
    assert "unsafe-eval" not in policy
    assert headers["x-frame-options"] == "DENY"
    assert dashboard.get("/static/app.js").status_code == 200
    # The policy allows no inline script, so no page carries one (it would not run).
    for path in ("/", "/?fragment=live", "/jobs", "/failed", "/schedules", "/workers"):
        html = dashboard.get(path).text
        assert re.findall(r"<script(?![^>]*\bsrc=)", html) == [], path
        assert re.search(r"\son[a-z]+\s*=", html) is None, path
        assert "javascript:" not in html, path


def test_mounted_under_a_prefix_links_and_redirects_stay_under_it(
    pg_store: PostgresStore, web_queue: Queue
) -> None:
    parent = Dashboard(Starlette(routes=[Mount("/queue", create_app(pg_store))]))
    job_id = web_queue.add("t", {}, delay=3600)
    home = parent.get("/queue/")
    assert home.status_code == 200
    assert 'href="/queue/jobs"' in home.text
    assert 'href="/queue/static/app.css"' in home.text
    assert parent.get("/queue/static/app.css").status_code == 200
    assert f'href="/queue/jobs/{job_id}"' in parent.get("/queue/jobs").text
    assert parent.get("/queue/healthz").status_code == 200
    answer = parent.post(f"/queue/jobs/{job_id}/run-now")
    assert answer.status_code == 303
    assert answer.headers["location"] == f"/queue/jobs/{job_id}?notice=run-now"
    assert parent.get("/jobs").status_code == 404  # nothing outside the mount


# -- Host (DNS rebinding) -----------------------------------------------------------------


def test_a_request_whose_host_is_not_allowed_gets_400_and_changes_nothing(
    pg_store: PostgresStore, web_queue: Queue
) -> None:
    # The probe: a page on attacker.example re-pointed at 127.0.0.1 posts "same-origin".
    job_id = web_queue.add("t", {"secret": "hunter2"})
    dashboard = Dashboard(create_app(pg_store, show_payloads=True))
    rebound = {"host": "attacker.example:8091"}
    answer = dashboard.post("/types/t/pause", origin="http://attacker.example:8091",
                            headers=rebound)
    assert answer.status_code == 400
    assert pg_store.type_paused() == {}
    for path in ("/", f"/jobs/{job_id}", "/jobs", "/healthz", "/static/app.js"):
        page = dashboard.get(path, headers=rebound)
        assert page.status_code == 400, path
        assert "hunter2" not in page.text
        assert "content-security-policy" in page.headers
    for host in ("", "attacker.example", "localhost.attacker.example", "[::1]evil",
                 "127.0.0.1:80:80", "localhost:http", "127.0.0.1@attacker.example"):
        assert dashboard.get("/", headers={"host": host}).status_code == 400, host
    # The loopback names, on any port, and IPv6 in brackets.
    for host in ("localhost", "localhost:8091", "LOCALHOST.", "127.0.0.1:8091", "[::1]:8091",
                 "[::1]"):
        assert dashboard.get("/", headers={"host": host}).status_code == 200, host
    # Actions still need a same-origin Origin on an allowed host.
    assert dashboard.post("/types/t/pause", origin="http://attacker.example:8091",
                          headers={"host": "localhost:8091"}).status_code == 403
    assert pg_store.type_paused() == {}
    page = dashboard.get(f"/jobs/{job_id}", headers={"host": "[::1]:8091"})
    assert "hunter2" in page.text


def test_allowed_hosts_names_the_domain_a_mounted_app_is_reached_by(
    pg_store: PostgresStore
) -> None:
    app = create_app(pg_store, allowed_hosts=["queue.example.com", "*.internal.test",
                                              "10.0.0.0/8"])
    dashboard = Dashboard(Starlette(routes=[Mount("/queue", app)]))
    for host, status in [("queue.example.com", 200), ("QUEUE.example.com:443", 200),
                         ("a.internal.test", 200), ("internal.test", 400),
                         ("10.1.2.3:8080", 200), ("11.0.0.1", 400), ("localhost", 400),
                         ("queue.example.com.attacker.example", 400)]:
        assert dashboard.get("/queue/", headers={"host": host}).status_code == status, host
    anywhere = Dashboard(create_app(pg_store, allowed_hosts=["*"]))
    assert anywhere.get("/", headers={"host": "attacker.example"}).status_code == 200
    for bad in (["a b"], ["http://x/"], [""], "localhost", ["x/99"], [None]):
        with pytest.raises(ValueError, match="allowed_hosts"):
            create_app(pg_store, allowed_hosts=bad)  # type: ignore[arg-type]


# -- names in URLs ------------------------------------------------------------------------

#: Type names that a path built without encoding would turn into another route or type.
HOSTILE_NAMES = ["evil/../victim.type", "a/pause", "x/resume/pause", "100%", "%2e%2e",
                 "q?x=1&y=2", "h#frag", "ünïcödé ✓ 型", "with space", "back\\slash", "+plus",
                 "..x", "semi;colon", "a/", "/lead"]


def test_type_names_round_trip_through_links_and_pause_resume_forms(
    pg_store: PostgresStore, web_queue: Queue
) -> None:
    dashboard = Dashboard(create_app(pg_store))
    web_queue.add("victim.type", {})
    ids = {name: web_queue.add(name, {}) for name in [*HOSTILE_NAMES, ".", ".."]}
    overview = dashboard.get("/").text
    for name in HOSTILE_NAMES:
        segment = quote(name, safe="")
        # Every link and form names the type as one encoded segment.
        assert f'href="/jobs?type={segment}"' in overview, name
        action = f"/types/{segment}/pause"
        assert f'action="{action}"' in overview, name
        listed = dashboard.get(f"/jobs?type={segment}").text
        assert f'data-id="{ids[name]}"' in listed, name
        assert dashboard.post(action, {"reason": "r"}).status_code == 303, name
        assert set(pg_store.type_paused()) == {name}, name  # victim.type untouched
        resume = f"/types/{segment}/resume"
        assert f'action="{resume}"' in dashboard.get("/").text, name
        assert dashboard.post(resume).status_code == 303, name
        assert pg_store.type_paused() == {}, name
    # "." and "..": no encoding survives a browser's dot-segment rule, so no form names them.
    assert '<tr data-type=".">' in overview  # listed, with no pause form
    assert 'action="/types/./pause"' not in overview
    assert 'action="/types/../pause"' not in overview


# -- no input answers 500 -----------------------------------------------------------------

#: Raw query values: past bigint, negative, non-numeric, other scripts' digits, NUL bytes,
#: broken percent-escapes, overlong and surrogate UTF-8, markup, very long.
HOSTILE_VALUES = [
    b"9223372036854775807", b"9223372036854775808", b"99999999999999999999", b"-1", b"0",
    b"1e3", b"%EF%BC%91", b"%C2%B2", b"abc", b"%00", b"1%00", b"a%00b", b"%", b"%zz",
    b"%FF%FE", b"%C0%AF", b"%ED%A0%80", b"%3Cscript%3Ealert(1)%3C%2Fscript%3E",
    b"x" * 20_000, b"%27;DROP+TABLE+jobs--", b"+++", b"", b"failed%00", b"..%2F..",
    b"%E2%80%AE", b"1&id=2&id=3",
]
PARAMETERS = ["type", "status", "scope_type", "scope_id", "tag", "id", "after", "before", "q",
              "fragment", "notice", "unknown"]


def test_no_query_value_or_job_id_makes_a_page_answer_500(
    pg_store: PostgresStore, web_queue: Queue
) -> None:
    dashboard = Dashboard(create_app(pg_store))
    job_id = web_queue.add("t", {"secret": "hunter2"}, scope=("S", "1"), tags=["x"])
    assert job_id is not None
    workflow = Workflow("wf")
    workflow.add("t", {"secret": "hunter2"})
    workflow_id = web_queue.add_workflow(workflow).id
    answers: list[tuple[str, int, str]] = []
    for value in HOSTILE_VALUES:
        # /jobs reads every filter: one parameter at a time, so each is checked.
        for name in PARAMETERS:
            query = name.encode() + b"=" + value
            answers.append((f"/jobs?{query!r}", *dashboard.raw_get("/jobs", query)))
        # The other pages read at most notice / fragment: every parameter at once.
        query = b"&".join(name.encode() + b"=" + value for name in PARAMETERS)
        for path in ("/", f"/jobs/{job_id}", "/failed", "/schedules", "/workers", "/healthz",
                     f"/workflows/{workflow_id}", f"/workflows/{workflow_id}/live"):
            answers.append((f"{path}?{query[:60]!r}", *dashboard.raw_get(path, query)))
        for prefix, suffix in (("/jobs/", ""), ("/workflows/", ""), ("/workflows/", "/live")):
            path = prefix + unquote(value.decode("latin-1")) + suffix
            answers.append((repr(path[:60]), *dashboard.raw_get(path)))
    for what, status, body in answers:
        assert status in (200, 307, 400, 404), (what, status)  # 307: "/jobs/" to "/jobs"
        assert "hunter2" not in body, what
        assert "<script>alert" not in body, what
    # The probe's cases: the largest bigint is a job id like any other, one past it is not.
    assert dashboard.raw_get("/jobs", b"id=9223372036854775807")[0] == 200
    for query in (b"id=9223372036854775808", b"after=9223372036854775808", b"id=-1"):
        status, body = dashboard.raw_get("/jobs", query)
        assert status == 400
        assert f"{query.split(b'=')[0].decode()} must be a job id" in body
    assert dashboard.raw_get("/jobs/9223372036854775808")[0] == 404
    assert dashboard.raw_get("/workflows/9223372036854775808")[0] == 404
    assert dashboard.raw_get("/workflows/9223372036854775807")[0] == 404


BULK_FIELDS = ["action", "ids", "all", "confirm", "q", "type", "status", "scope_type",
               "scope_id", "tag"]


def test_no_bulk_cancel_or_schedule_value_makes_an_action_answer_500(
    pg_store: PostgresStore, web_queue: Queue
) -> None:
    dashboard = Dashboard(create_app(pg_store))
    job_id = web_queue.add("t", {"secret": "hunter2"}, scope=("S", "1"), tags=["x"])
    assert job_id is not None
    answers: list[tuple[str, int, str]] = []
    for raw in HOSTILE_VALUES:
        value = unquote(raw.decode("latin-1"), errors="surrogateescape")
        for name in BULK_FIELDS:
            base = {"action": "retry", "all": "1", "confirm": "1"}
            for form in ({**base, name: value}, {"action": "cancel", "ids": job_id, name: value}):
                answer = dashboard.request(
                    "POST", "/jobs/bulk", content=_form_body(form),
                    headers={"origin": ORIGIN,
                             "content-type": "application/x-www-form-urlencoded"})
                answers.append((f"bulk {name}={raw[:40]!r}", answer.status_code, answer.text))
        answer = dashboard.request(
            "POST", f"/jobs/{job_id}/cancel", content=_form_body({"confirm": value}),
            headers={"origin": ORIGIN, "content-type": "application/x-www-form-urlencoded"})
        answers.append((f"cancel confirm={raw[:40]!r}", answer.status_code, answer.text))
        for action in ("run-now", "pause", "resume", "explode"):
            answer = dashboard.request("POST", f"/schedules/{raw.decode('latin-1')}/{action}",
                                       headers={"origin": ORIGIN})
            answers.append((f"schedule {raw[:40]!r} {action}", answer.status_code, answer.text))
    for what, status, body in answers:
        assert status in (200, 303, 400, 404), (what, status)
        assert "hunter2" not in body, what
        assert "<script>alert" not in body, what
    assert pg_store.job_get(job_id) is not None  # nothing hostile confirmed the cancel


def _form_body(form: dict[str, str]) -> bytes:
    """A urlencoded form body, each value kept as raw bytes (NULs, broken UTF-8)."""
    return b"&".join(
        quote(k).encode() + b"=" + quote(v.encode("utf-8", "surrogateescape"), safe="").encode()
        for k, v in form.items()
    )


def test_an_unlimited_budget_shows_as_unlimited_on_the_job_page_and_the_jobs_list(
    dashboard: Dashboard, web_queue: Queue
) -> None:
    forever = web_queue.add("sync.forever", {}, max_attempts=UNLIMITED)
    bounded = web_queue.add("sync.bounded", {}, max_attempts=4)
    page = dashboard.get(f"/jobs/{forever}")
    assert page.status_code == 200
    assert "<dd>0 of unlimited</dd>" in page.text
    assert "<dd>0 of 4</dd>" in dashboard.get(f"/jobs/{bounded}").text
    listing = dashboard.get("/jobs")
    assert listing.status_code == 200
    assert '<td>0/<abbr title="unlimited">∞</abbr></td>' in listing.text
    assert "<td>0/4</td>" in listing.text
