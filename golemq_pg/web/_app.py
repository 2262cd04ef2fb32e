"""``create_app``: the dashboard's Starlette application, its guard and its plumbing routes.

The guard (:class:`Guard`, an ASGI middleware) runs before every route: the ``Host`` check
(400 unless the request's ``Host`` is allowed, :mod:`golemq_pg.web._hosts`: DNS rebinding),
HTTP basic auth when configured (``/healthz`` excepted, so a load balancer can probe it),
then for a POST
the read-only refusal and the same-origin check (``Origin``, else ``Referer``, must be the
app's own scheme://host; neither present is refused too), then security headers on every
answer (a strict Content-Security-Policy: scripts and styles only from the app itself).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac
import importlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from golemq_pg._types import Resource
from golemq_pg.queue import AsyncQueue
from golemq_pg.store import calls
from golemq_pg.store.calls import AnyStore
from golemq_pg.store.dashboard import COUNT_CAP
from golemq_pg.web import _actions, _jobpage, _overview, _pages, _workflow
from golemq_pg.web._hosts import HostPolicy

#: Seconds /healthz waits for the database before answering 503.
HEALTH_TIMEOUT = 3.0

_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        b"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]


def create_app(
    store: AnyStore,
    *,
    read_only: bool = False,
    show_payloads: bool = False,
    basic_auth: tuple[str, str] | None = None,
    title: str = "golemq-pg",
    resources: Mapping[str, Resource] | None = None,
    allowed_hosts: Sequence[str] | None = None,
) -> Starlette:
    """The dashboard as an ASGI app over ``store`` (mount it: ``api.mount("/queue", app)``):
    a ``PostgresStore`` or ``InMemoryStore`` (each read then runs in a worker thread) or an
    ``AsyncPostgresStore`` (awaited on the app's event loop, no thread per read).

    ``read_only``: every action answers 403. ``show_payloads``: job pages show payloads
    (hidden otherwise). ``basic_auth``: ``(user, password)`` every request must carry.
    ``title``: the pages' heading. ``resources``: the workers' resource pools, so the
    workers page can show their in-use cost (without it, only what the database knows: the
    rate spend of each pool). ``allowed_hosts``: the ``Host`` names the app answers (any
    other gets 400, so a DNS-rebinding page cannot reach it); None allows the loopback
    names only (``localhost``, ``127.0.0.1``, ``[::1]``, any port). Mounted on a real
    domain, pass it: ``["queue.example.com"]``; entries may also be ``"*.example.com"``, an
    IP address, a network (``"10.0.0.0/8"``: any address literal in it) or ``"*"`` (no
    check).
    """
    hosts = HostPolicy.of(allowed_hosts)
    if basic_auth is not None:
        user, password = basic_auth
        if not (isinstance(user, str) and isinstance(password, str) and user and password):
            raise ValueError("basic_auth must be a (user, password) pair of non-empty strings")
    if not isinstance(title, str) or not title.strip():
        raise ValueError("title must be a non-empty string")
    static = Path(__file__).with_name("static")
    app = Starlette(
        routes=[
            Route("/", _overview.overview, name="overview"),
            Route("/jobs", _pages.jobs, name="jobs"),
            Route("/jobs/bulk", _actions.bulk, methods=["POST"]),
            Route("/jobs/{job_id}", _jobpage.job, name="job"),
            Route("/jobs/{job_id}/live", _jobpage.job_live, name="job-live"),
            Route("/workflows/{workflow_id}", _workflow.workflow, name="workflow"),
            Route("/workflows/{workflow_id}/live", _workflow.workflow_live, name="workflow-live"),
            Route("/failed", _pages.failed, name="failed"),
            Route("/schedules", _pages.schedules, name="schedules"),
            Route("/workers", _pages.workers, name="workers"),
            Route("/healthz", healthz, name="healthz"),
            Route("/metrics", metrics, name="metrics"),
            Route("/jobs/{job_id}/retry", _actions.retry, methods=["POST"]),
            Route("/jobs/{job_id}/run-now", _actions.run_now, methods=["POST"]),
            Route("/jobs/{job_id}/cancel", _actions.cancel, methods=["POST"]),
            Route("/failed/retry", _actions.retry_matching, methods=["POST"]),
            Route("/schedules/{key:path}/{action}", _actions.schedule_action, methods=["POST"]),
            Route("/types/{job_type:path}/pause", _actions.pause, methods=["POST"]),
            Route("/types/{job_type:path}/resume", _actions.resume, methods=["POST"]),
            Mount("/static", StaticFiles(directory=static), name="static"),
        ],
        exception_handlers={404: _pages.not_found},
    )
    app.state.store = store
    app.state.queue = AsyncQueue(store)
    app.state.read_only = bool(read_only)
    app.state.show_payloads = bool(show_payloads)
    app.state.title = title
    app.state.resources = dict(resources or {})
    app.add_middleware(Guard, basic_auth=basic_auth, read_only=bool(read_only), hosts=hosts)
    return app


class Guard:
    """Auth, read-only, same-origin and security headers (see the module docstring)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        basic_auth: tuple[str, str] | None,
        read_only: bool,
        hosts: HostPolicy,
    ) -> None:
        self.app = app
        self.read_only = read_only
        self.hosts = hosts
        self.expected: bytes | None = None
        if basic_auth is not None:
            self.expected = f"{basic_auth[0]}:{basic_auth[1]}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check the request, then run the app with the security headers added."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_HEADERS]
            await send(message)

        refusal = self.refusal(scope)
        if refusal is not None:
            await refusal(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)

    def refusal(self, scope: Scope) -> Response | None:
        """The answer that refuses this request, or None to let it through."""
        headers = Headers(scope=scope)
        if not self.hosts.allows(headers.get("host")):
            # Before auth: a rebinding page learns nothing, not even whether auth is on.
            return PlainTextResponse("host not allowed: see allowed_hosts", status_code=400)
        route = route_path(scope)
        if self.expected is not None and route != "/healthz" and not self.authorized(headers):
            return PlainTextResponse(
                "authentication required",
                status_code=401,
                headers={"WWW-Authenticate": 'Basic realm="golemq-pg", charset="UTF-8"'},
            )
        if scope["method"] not in ("GET", "HEAD"):
            if self.read_only:
                return PlainTextResponse("read-only dashboard: actions are off", 403)
            if not same_origin(scope, headers):
                return PlainTextResponse("cross-origin request refused", 403)
        return None

    def authorized(self, headers: Headers) -> bool:
        """Whether the Authorization header carries the configured credentials."""
        value = headers.get("authorization", "")
        scheme, _, token = value.partition(" ")
        if scheme.lower() != "basic" or self.expected is None:
            return False
        try:
            given = base64.b64decode(token.strip(), validate=True)
        except (binascii.Error, ValueError):
            return False
        return hmac.compare_digest(given, self.expected)


def route_path(scope: Scope) -> str:
    """The request's path below where the app is mounted."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root):
        path = path[len(root):]
    return path or "/"


def same_origin(scope: Scope, headers: Headers) -> bool:
    """Whether the request's ``Origin`` (else ``Referer``) is this app's scheme://host."""
    host = headers.get("host")
    if not host:
        return False
    own = f"{scope.get('scheme', 'http')}://{host}".lower()
    origin = headers.get("origin")
    if origin is None:
        referer = headers.get("referer")
        if not referer:
            return False
        parts = urlsplit(referer)
        origin = f"{parts.scheme}://{parts.netloc}"
    return hmac.compare_digest(origin.strip().lower().encode(), own.encode())


async def healthz(request: Request) -> JSONResponse:
    """200 ``{"status": "ok"}`` when the database answers within a few seconds, else 503."""
    try:
        now = await asyncio.wait_for(_pages.read(request, calls.now()), HEALTH_TIMEOUT)
    except Exception as exc:  # noqa: BLE001 - any failure to answer is "unavailable"
        reason = "timeout" if isinstance(exc, TimeoutError) else type(exc).__name__
        return JSONResponse({"status": "unavailable", "error": reason}, status_code=503)
    return JSONResponse({"status": "ok", "database_time": now.isoformat()})


async def metrics(request: Request) -> Response:
    """The queue's Prometheus metrics when the ``metrics`` extra is installed, else 404."""
    try:  # imported lazily: both are optional (the metrics extra)
        client: Any = importlib.import_module("prometheus_client")
        collectors: Any = importlib.import_module("golemq_pg.metrics")
    except ImportError:
        return PlainTextResponse("metrics need the metrics extra", status_code=404)
    registry = client.CollectorRegistry(auto_describe=False)
    try:  # read here, so an async store is awaited; a failed read leaves the gauges out
        gauges = await _pages.read(request, calls.metrics_type_gauges(COUNT_CAP))
        workers = await _pages.read(request, calls.worker_list())
    except Exception as exc:  # noqa: BLE001 - a failed read must not fail the scrape
        collectors.log.warning("metrics_collect_failed", error_type=type(exc).__name__)
    else:
        registry.register(collectors.GaugeSnapshot(gauges, workers, COUNT_CAP))
    body: bytes = await run_in_threadpool(client.generate_latest, registry)
    return Response(body, media_type=client.CONTENT_TYPE_LATEST)
