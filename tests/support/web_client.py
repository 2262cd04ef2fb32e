"""A synchronous client for the dashboard's ASGI app: every request goes through httpx's
ASGI transport (no server, no socket), on a fresh event loop per request or on a given
loop thread (an app over an ``AsyncPostgresStore`` must run on its store's loop)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from tests.support.async_bridge import LoopThread

#: The origin the client's requests come from (the app sees Host "localhost", which a
#: dashboard answers by default: see ``allowed_hosts``).
ORIGIN = "http://localhost"


class Dashboard:
    """``get`` / ``post`` against an ASGI app as a browser on ``ORIGIN`` would send them."""

    def __init__(self, app: Any, *, loop: LoopThread | None = None) -> None:
        self.app = app
        self.loop = loop

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request; redirects are not followed (tests look at the 303)."""

        async def send() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url=ORIGIN) as client:
                return await client.request(method, path, **kwargs)

        if self.loop is not None:
            return self.loop.run(send())
        return asyncio.run(send())

    def raw_get(
        self, path: str, query: bytes = b"", *, host: bytes = b"localhost"
    ) -> tuple[int, str]:
        """A GET sent as given, bypassing httpx's URL normalisation: ``path`` is the
        decoded path and ``query`` the raw query string (invalid percent-escapes, encoded
        NULs and overlong UTF-8 arrive as a client sent them). Returns (status, body)."""
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": "GET", "scheme": "http", "path": path,
            "raw_path": path.encode("utf-8", "surrogateescape"), "query_string": query,
            "root_path": "", "headers": [(b"host", host)],
            "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 80),
        }
        status = 0
        body = bytearray()

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                body.extend(message.get("body", b""))

        async def call() -> None:
            await self.app(scope, receive, send)

        if self.loop is not None:
            self.loop.run(call())
        else:
            asyncio.run(call())
        return status, body.decode("utf-8", "replace")

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        """A GET."""
        return self.request("GET", path, **kwargs)

    def post(
        self, path: str, data: dict[str, str] | None = None, *, origin: str | None = ORIGIN,
        **kwargs: Any,
    ) -> httpx.Response:
        """A form POST carrying ``Origin: origin`` (None: no Origin header)."""
        headers = dict(kwargs.pop("headers", {}))
        if origin is not None:
            headers["origin"] = origin
        return self.request("POST", path, data=data or {}, headers=headers, **kwargs)
