"""A synchronous client for the dashboard's ASGI app: every request goes through httpx's
ASGI transport (no server, no socket), on a fresh event loop per request or on a given
loop thread (an app over an ``AsyncPostgresStore`` must run on its store's loop)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from tests.support.async_bridge import LoopThread

#: The origin the client's requests come from (the app sees Host "dash.test").
ORIGIN = "http://dash.test"


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
