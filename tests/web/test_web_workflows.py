"""The dashboard's workflow surface through httpx's ASGI transport against a real store: the
workflow page (graph, jobs table, live fragment, 404s), the job page's links to its
workflow, parents and children, the overview's waiting count and the jobs list's
``waiting`` filter."""

from __future__ import annotations

import re

from golemq_pg import PostgresStore, Queue, Workflow
from golemq_pg._types import WorkflowRun
from golemq_pg.store.port import FailItem
from golemq_pg.web import create_app
from tests.support.store_port import claim, refs, slots
from tests.support.web_client import Dashboard

HOSTILE = "<script>alert(1)</script>"


def _ingest(queue: Queue, pages: int = 3, name: str = "ingest doc42") -> tuple[
        WorkflowRun, str, list[str], str]:
    wf = Workflow(name)
    fetch = wf.add("doc.fetch", {"url": "u"})
    extract = [wf.add("doc.extract", {"page": i}, after=[fetch]) for i in range(pages)]
    index = wf.add("doc.index", {}, after=extract)
    run = queue.add_workflow(wf)
    return run, run.job_ids[fetch], [run.job_ids[n] for n in extract], run.job_ids[index]


def _succeed(store: PostgresStore, job_type: str, limit: int = 1000) -> list[str]:
    jobs = claim(store, slots(job_type, limit=limit))
    done = store.job_complete_many("w1", refs(jobs))
    return sorted(done, key=int)


def _nodes(html: str) -> dict[str, str]:
    """The graph's linked nodes: job id -> the status class it is drawn with."""
    found = re.findall(r'<a class="wf-node wf-(\w+)" href="[^"]*/jobs/(\d+)" '
                       r'data-job="(\d+)" data-status="(\w+)"', html)
    out = {}
    for status, href_id, job_id, data_status in found:
        assert href_id == job_id
        assert status == data_status
        out[job_id] = status
    return out


def test_the_workflow_page_draws_its_jobs_as_linked_nodes_by_status_with_edges_and_a_table(
    dashboard: Dashboard, pg_store: PostgresStore, web_queue: Queue
) -> None:
    run, fetch, extract, index = _ingest(web_queue)
    page = dashboard.get(f"/workflows/{run.id}")
    assert page.status_code == 200
    html = page.text
    assert "ingest doc42" in html
    assert 'id="workflow-status">running<' in html
    assert f'data-live="/workflows/{run.id}/live"' in html
    assert '<svg class="wf-graph"' in html
    assert _nodes(html) == {fetch: "pending", **dict.fromkeys(extract, "waiting"),
                            index: "waiting"}
    assert html.count('class="wf-edge"') == 6
    assert f'data-parent="{fetch}" data-child="{extract[0]}"' in html
    assert f'data-parent="{extract[2]}" data-child="{index}"' in html
    assert 'marker-end="url(#wf-arrow)"' in html
    # Layers: fetch above the extracts, which are above the index.
    ys = {job: float(y) for job, y in re.findall(
        r'data-job="(\d+)" data-status="\w+">\s*<title>[^<]*</title>\s*<rect x="[\d.]+" '
        r'y="([\d.]+)"', html)}
    assert ys[fetch] < ys[extract[0]] == ys[extract[1]] == ys[extract[2]] < ys[index]
    table = html.split('id="workflow-jobs"')[1]
    assert [int(i) for i in re.findall(r'<tr data-id="(\d+)">', table)] == sorted(
        int(j) for j in (fetch, *extract, index))
    assert f'<a href="/jobs/{extract[0]}">{extract[0]}</a>, ' in table  # index's parents

    _succeed(pg_store, "doc.fetch")
    live = dashboard.get(f"/workflows/{run.id}/live")
    assert live.status_code == 200
    assert "<html" not in live.text
    assert _nodes(live.text)[fetch] == "succeeded"
    assert {_nodes(live.text)[e] for e in extract} == {"pending"}
    assert "data-live-stop" not in live.text


def test_a_finished_workflow_page_stops_refreshing_and_shows_when_it_finished(
    dashboard: Dashboard, pg_store: PostgresStore, web_queue: Queue
) -> None:
    run, *_ = _ingest(web_queue, pages=2)
    for job_type in ("doc.fetch", "doc.extract", "doc.index"):
        _succeed(pg_store, job_type)
    page = dashboard.get(f"/workflows/{run.id}").text
    assert 'id="workflow-status">succeeded<' in page
    assert "data-live=" not in page
    assert "data-live-stop" in page
    assert set(_nodes(page).values()) == {"succeeded"}
    finished = page.split("<dt>finished</dt>")[1].split("</dd>")[0]
    assert "<time datetime=" in finished


def test_a_failed_parent_fails_its_children_and_the_page_shows_them_failed(
    dashboard: Dashboard, pg_store: PostgresStore, web_queue: Queue
) -> None:
    run, fetch, extract, index = _ingest(web_queue, pages=1)
    (job,) = claim(pg_store, slots("doc.fetch", limit=1))
    pg_store.job_fail_many("w1", [FailItem(job.id, job.lease_token, "E: gone", None)])
    page = dashboard.get(f"/workflows/{run.id}").text
    assert 'id="workflow-status">failed<' in page
    assert _nodes(page) == {fetch: "failed", extract[0]: "failed", index: "failed"}
    assert f"parent {fetch} failed" in page


def test_a_cancelled_workflow_keeps_its_edges_with_gone_nodes_and_no_links(
    dashboard: Dashboard, web_queue: Queue
) -> None:
    run, fetch, extract, _ = _ingest(web_queue, pages=2)
    assert web_queue.cancel_workflow(run.id) == 4
    page = dashboard.get(f"/workflows/{run.id}")
    assert page.status_code == 200
    assert 'id="workflow-status">cancelled<' in page.text
    assert _nodes(page.text) == {}
    assert page.text.count('data-status="gone"') == 4
    assert f'data-parent="{fetch}" data-child="{extract[1]}"' in page.text
    assert "No job of this workflow is left" in page.text


def test_a_fan_out_of_a_hundred_wraps_into_rows_that_fit_the_page(
    dashboard: Dashboard, web_queue: Queue
) -> None:
    run, *_ = _ingest(web_queue, pages=100)
    page = dashboard.get(f"/workflows/{run.id}").text
    assert len(_nodes(page)) == 102
    width, height = (int(v) for v in re.search(
        r'<svg class="wf-graph" id="workflow-graph" viewBox="0 0 (\d+) (\d+)"', page).groups())
    assert width <= 1240  # the page's content width: no horizontal scrolling at 1280
    graph = page.split('id="workflow-graph"')[1].split("</svg>")[0]
    rows = set(re.findall(r'<rect x="[\d.]+" y="([\d.]+)"', graph))
    assert len(rows) == 1 + 15 + 1  # 100 extracts in rows of 7
    assert height > 15 * 40
    assert page.count('class="wf-edge"') == 200


def test_unknown_and_malformed_workflow_ids_answer_404(dashboard: Dashboard) -> None:
    for path in ("/workflows/987654321", "/workflows/987654321/live", "/workflows/x1",
                 "/workflows/-1", "/workflows/9223372036854775808", "/workflows/1%2F2"):
        answer = dashboard.get(path)
        assert answer.status_code == 404, path
    assert "no workflow 987654321" in dashboard.get("/workflows/987654321").text


def test_a_hostile_workflow_name_and_type_are_escaped(
    dashboard: Dashboard, web_queue: Queue
) -> None:
    wf = Workflow(HOSTILE)
    first = wf.add(HOSTILE, {})
    wf.add("t", {}, after=[first])
    run = web_queue.add_workflow(wf)
    for path in (f"/workflows/{run.id}", f"/workflows/{run.id}/live",
                 f"/jobs/{run.job_ids[first]}"):
        answer = dashboard.get(path)
        assert answer.status_code == 200
        assert "<script>alert" not in answer.text
        assert "&lt;script&gt;" in answer.text


def test_the_job_page_links_its_workflow_parents_and_children(
    dashboard: Dashboard, pg_store: PostgresStore, web_queue: Queue
) -> None:
    run, fetch, extract, index = _ingest(web_queue, pages=2)
    _succeed(pg_store, "doc.fetch")
    middle = dashboard.get(f"/jobs/{extract[0]}").text
    assert f'<a id="job-workflow" href="/workflows/{run.id}">workflow {run.id}</a>' in middle
    parents = middle.split('id="job-parents"')[1].split("</ul>")[0]
    assert f'href="/jobs/{fetch}"' in parents
    assert 'class="status status-succeeded"' in parents
    children = middle.split('id="job-children"')[1].split("</ul>")[0]
    assert re.findall(r'data-job="(\d+)"', children) == [index]
    waiting = dashboard.get(f"/jobs/{index}").text
    assert 'id="job-status">waiting<' in waiting
    assert 'data-live="/jobs/' in waiting  # a waiting job is live: its page refreshes
    assert 'id="cancel"' in waiting
    assert "once every parent has succeeded" in waiting
    assert 'id="job-children"' not in waiting
    lone = web_queue.add("t", {})
    plain = dashboard.get(f"/jobs/{lone}").text
    assert "job-workflow" not in plain
    assert "job-parents" not in plain
    # depends_on without a workflow: links, and no workflow.
    child = web_queue.add("t", {}, depends_on=[lone])
    assert child is not None
    linked = dashboard.get(f"/jobs/{lone}").text
    assert f'data-job="{child}"' in linked.split('id="job-children"')[1]
    assert "job-workflow" not in linked


def test_the_overview_counts_waiting_jobs_and_the_jobs_list_filters_them(
    dashboard: Dashboard, web_queue: Queue
) -> None:
    _, fetch, extract, index = _ingest(web_queue, pages=3)
    overview = dashboard.get("/").text
    assert '<span class="value" id="count-waiting">4</span>' in overview
    assert 'href="/jobs?status=waiting"' in overview
    waiting = dashboard.get("/jobs", params={"status": "waiting"})
    assert waiting.status_code == 200
    listed = re.findall(r'<tr data-id="(\d+)">', waiting.text)
    assert listed == sorted([*extract, index], key=int, reverse=True)
    assert 'class="status status-waiting"' in waiting.text
    pending = re.findall(r'<tr data-id="(\d+)">',
                         dashboard.get("/jobs", params={"status": "pending"}).text)
    assert pending == [fetch]


def test_the_workflow_page_works_over_the_in_memory_store() -> None:
    from golemq_pg import InMemoryStore  # noqa: PLC0415

    store = InMemoryStore()
    queue = Queue(store)
    run, fetch, extract, index = _ingest(queue, pages=2)
    dashboard = Dashboard(create_app(store))
    page = dashboard.get(f"/workflows/{run.id}")
    assert page.status_code == 200
    assert _nodes(page.text) == {fetch: "pending", **dict.fromkeys(extract, "waiting"),
                                 index: "waiting"}
    job = dashboard.get(f"/jobs/{index}").text
    assert f'href="/workflows/{run.id}"' in job
    assert '<span class="value" id="count-waiting">3</span>' in dashboard.get("/").text
    assert dashboard.get("/workflows/12345").status_code == 404
