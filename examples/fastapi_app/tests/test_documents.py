"""The documents service through HTTP: a document and its job commit together or not at
all, a real worker process runs the async and the sync handler, and a client waits for a
job's result with a timeout. Real PostgreSQL throughout."""

import hashlib
import subprocess

import httpx
import psycopg

from golemq_pg import JobStatus, Queue


def titled(database: psycopg.Connection, *titles: str) -> list[str]:
    """The titles among ``titles`` that exist in the documents table."""
    rows = database.execute(
        "SELECT title FROM documents WHERE title = ANY(%s) ORDER BY title", (list(titles),)
    ).fetchall()
    return [row[0] for row in rows]


def all_jobs(queue: Queue) -> int:
    """How many jobs the queue holds, in any state."""
    return sum(queue.count_by_status().values())


def test_a_created_document_commits_with_its_summarize_job(
    client: httpx.Client, queue: Queue, database: psycopg.Connection
) -> None:
    response = client.post("/documents", json={"title": "committed", "body": "One. Two."})
    assert response.status_code == 201
    created = response.json()
    assert titled(database, "committed") == ["committed"]
    job = queue.get(created["job_id"])
    assert job is not None
    assert (job.type, job.scope) == ("document.summarize", ("Document", str(created["id"])))


def test_a_failed_import_leaves_no_document_and_no_job(
    client: httpx.Client, queue: Queue, database: psycopg.Connection
) -> None:
    jobs_before = all_jobs(queue)
    response = client.post("/documents/import", json=[
        {"title": "import-a", "body": "first, enqueued, then rolled back"},
        {"title": "import-b", "body": "second"},
        {"title": "import-a", "body": "a duplicate title: the import fails here"},
    ])
    assert response.status_code == 409
    assert titled(database, "import-a", "import-b") == []
    assert all_jobs(queue) == jobs_before


def test_a_successful_import_commits_every_document_with_its_job(
    client: httpx.Client, queue: Queue
) -> None:
    response = client.post("/documents/import", json=[
        {"title": "batch-1", "body": "x"}, {"title": "batch-2", "body": "y"},
    ])
    assert response.status_code == 201
    for created in response.json():
        job = queue.get(created["job_id"])
        assert job is not None
        assert job.scope == ("Document", str(created["id"]))


def test_an_invalid_document_is_refused_and_enqueues_nothing(
    client: httpx.Client, queue: Queue
) -> None:
    jobs_before = all_jobs(queue)
    assert client.post("/documents", json={"title": "", "body": "x"}).status_code == 422
    assert client.post("/documents/import", json=[]).status_code == 422
    assert all_jobs(queue) == jobs_before


def test_the_async_handler_summarizes_in_the_worker_process(
    client: httpx.Client, worker_process: subprocess.Popen[bytes]
) -> None:
    body = "Queues are useful. They decouple work from requests and retry it."
    created = client.post("/documents", json={"title": "summarized", "body": body}).json()
    response = client.get(f"/jobs/{created['job_id']}/result", params={"timeout": 20})
    assert response.status_code == 200
    outcome = response.json()
    assert (outcome["status"], outcome["result"]) == ("succeeded", {"words": 11})
    document = client.get(f"/documents/{created['id']}").json()
    assert (document["summary"], document["word_count"]) == ("Queues are useful", 11)


def test_the_sync_transactional_handler_renders_in_the_worker_process(
    client: httpx.Client, worker_process: subprocess.Popen[bytes]
) -> None:
    created = client.post("/documents", json={"title": "Report", "body": "All good."}).json()
    enqueued = client.post(f"/documents/{created['id']}/render")
    assert enqueued.status_code == 202
    response = client.get(f"/jobs/{enqueued.json()['job_id']}/result", params={"timeout": 20})
    assert response.status_code == 200
    expected = hashlib.sha256(b"Report\n======\n\nAll good.\n").hexdigest()
    assert response.json()["result"] == {"sha256": expected, "bytes": 25}
    assert client.get(f"/documents/{created['id']}").json()["rendered_sha256"] == expected


def test_rendering_an_unknown_document_is_404(client: httpx.Client) -> None:
    assert client.post("/documents/999999999/render").status_code == 404


def test_waiting_past_the_timeout_answers_202_with_the_jobs_state(
    client: httpx.Client, queue: Queue
) -> None:
    # Due in an hour: no worker runs it while the client waits.
    job_id = queue.add("document.render", {"document_id": 1}, delay=3600)
    assert job_id is not None
    response = client.get(f"/jobs/{job_id}/result", params={"timeout": 0.2})
    assert response.status_code == 202
    assert response.json()["status"] == JobStatus.PENDING.value


def test_waiting_for_an_unknown_job_is_404(client: httpx.Client) -> None:
    assert client.get("/jobs/999999999/result", params={"timeout": 0.2}).status_code == 404


def test_a_wait_longer_than_the_cap_is_refused(client: httpx.Client) -> None:
    assert client.get("/jobs/1/result", params={"timeout": 31}).status_code == 422


def test_the_dashboard_is_mounted_under_queue(client: httpx.Client, queue: Queue) -> None:
    # Due in an hour: the worker process (running for the tests above) leaves it pending, so
    # the overview lists its type whatever the worker has done meanwhile. A job the worker
    # may already have run (a created document's) is not listed once it succeeded.
    job_id = queue.add("document.summarize", {"document_id": 1}, delay=3600)
    assert job_id is not None
    assert client.get("/queue/healthz").status_code == 200
    overview = client.get("/queue/")
    assert overview.status_code == 200
    assert "document.summarize" in overview.text
    page = client.get(f"/queue/jobs/{job_id}")
    assert page.status_code == 200
    assert job_id in page.text


def test_the_dashboard_shows_a_job_the_worker_ran(
    client: httpx.Client, worker_process: subprocess.Popen[bytes]
) -> None:
    created = client.post("/documents", json={"title": "dashboard", "body": "secret"}).json()
    # Wait for the condition (the job finished), not for a while.
    done = client.get(f"/jobs/{created['job_id']}/result", params={"timeout": 20})
    assert done.status_code == 200
    page = client.get(f"/queue/jobs/{created['job_id']}")
    assert page.status_code == 200
    assert created["job_id"] in page.text
    assert "succeeded" in page.text
