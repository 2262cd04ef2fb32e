"""The real `golemq-pg workflow ID [--json]` against the real database: the header and a
table of the workflow's jobs with their parents that fits 80 columns, one JSON object with
`--json` (never a payload), `workflow ID not found` (exit 1) and bad ids (exit 2, before any
connection); `jobs --status waiting` lists the jobs held for their parents."""

from __future__ import annotations

import json
import re

from golemq_pg import PostgresStore, Queue, Workflow
from tests.support.cli import CANARY, assert_clean_failure, run_cli
from tests.support.store_port import claim, refs, slots


def _ingest(queue: Queue, pages: int) -> tuple[str, str, list[str], str]:
    wf = Workflow("ingest doc42")
    fetch = wf.add("doc.fetch", {"secret": CANARY})
    extract = [wf.add("doc.extract", {"secret": CANARY, "page": i}, after=[fetch])
               for i in range(pages)]
    index = wf.add("doc.index.a-rather-long-type-name-to-cut", {"secret": CANARY},
                   after=extract)
    run = queue.add_workflow(wf)
    return run.id, run.job_ids[fetch], [run.job_ids[n] for n in extract], run.job_ids[index]


def test_workflow_json_is_one_object_with_its_jobs_parents_and_edges(
    pg_dsn: str, pg_store: PostgresStore, schema: str
) -> None:
    workflow_id, fetch, extract, index = _ingest(Queue(pg_store), pages=2)
    pg_store.job_complete_many("w1", refs(claim(pg_store, slots("doc.fetch"))))
    result = run_cli("--schema", schema, "workflow", workflow_id, "--json", dsn=pg_dsn)
    assert result.returncode == 0, result.stderr
    assert CANARY not in result.stdout
    (line,) = result.stdout.splitlines()
    data = json.loads(line)
    assert (data["id"], data["name"], data["status"]) == (workflow_id, "ingest doc42",
                                                         "running")
    assert data["created_at"] is not None
    assert data["finished_at"] is None
    jobs = {job["id"]: job for job in data["jobs"]}
    assert list(jobs) == sorted(jobs, key=int)
    assert (jobs[fetch]["status"], jobs[fetch]["parents"]) == ("succeeded", [])
    assert [jobs[e]["status"] for e in extract] == ["pending", "pending"]
    assert jobs[extract[0]]["parents"] == [fetch]
    assert (jobs[index]["status"], jobs[index]["parents"]) == ("waiting", extract)
    assert data["edges"] == [[fetch, extract[0]], [fetch, extract[1]],
                             [extract[0], index], [extract[1], index]]
    assert "payload" not in jobs[fetch]


def test_workflow_prints_a_header_and_a_table_that_fits_80_columns(
    pg_dsn: str, pg_store: PostgresStore, schema: str
) -> None:
    workflow_id, fetch, extract, index = _ingest(Queue(pg_store), pages=12)
    result = run_cli("--schema", schema, "workflow", workflow_id, dsn=pg_dsn,
                     env={"COLUMNS": "200"})
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert CANARY not in out
    assert max(len(line) for line in out.splitlines()) <= 80
    header = out.split("jobs (14)")[0]
    for key, value in (("workflow", workflow_id), ("name", "ingest doc42"),
                       ("status", "running"), ("finished", "-")):
        assert any(line.split()[:1] == [key] and value in line
                   for line in header.splitlines()), (key, out)
    rows = {line.split()[0]: line for line in out.splitlines()
            if line.strip() and line.split()[0].isdigit()}
    assert set(rows) == {fetch, *extract, index}
    assert "pending" in rows[fetch]
    assert re.search(rf"waiting +{extract[0]}, {extract[1]}, ", rows[index])
    assert rows[index].rstrip().endswith("…")  # twelve parents: cut, not wrapped
    assert "doc.extract" in rows[extract[0]]


def test_workflow_unknown_id_exits_1_and_a_bad_id_exits_2(
    pg_dsn: str, pg_store: PostgresStore, schema: str
) -> None:
    unknown = run_cli("--schema", schema, "workflow", "987654321", dsn=pg_dsn)
    assert_clean_failure(unknown, 1)
    assert "workflow 987654321 not found" in unknown.stderr
    for bad in ("abc", "²", "1" * 20, "9223372036854775808"):
        result = run_cli("--schema", schema, "workflow", bad,
                         dsn="postgresql://nobody@127.0.0.1:1/none")  # never connected
        assert_clean_failure(result, 2)
        assert "ID: must be a workflow id" in result.stderr
    for args in (["--", "-1"], ["--json"]):  # a negative id; no id at all
        refused = run_cli("--schema", schema, "workflow", *args, dsn=pg_dsn)
        assert_clean_failure(refused, 2)


def test_jobs_status_waiting_lists_the_jobs_held_for_their_parents(
    pg_dsn: str, pg_store: PostgresStore, schema: str
) -> None:
    _, fetch, extract, index = _ingest(Queue(pg_store), pages=2)
    result = run_cli("--schema", schema, "jobs", "--status", "waiting", "--json", dsn=pg_dsn)
    assert result.returncode == 0, result.stderr
    listed = [json.loads(line)["id"] for line in result.stdout.splitlines()]
    assert listed == [index, *reversed(extract)]
    assert fetch not in listed
