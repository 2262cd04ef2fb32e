"""``golemq-pg web`` as a real process on a free loopback port, for the browser test."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from tests.support.waiting import wait_until


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@contextmanager
def web_process(
    dsn: str, schema: str, *options: str, env: dict[str, str] | None = None
) -> Iterator[str]:
    """Run ``golemq-pg web`` on a free port until the block ends; yields its base URL.
    ``env``: extra environment (e.g. ``GOLEMQ_WEB_USER``); the caller's own is dropped."""
    port = free_port()
    command = [sys.executable, "-m", "golemq_pg.cli", "--dsn", dsn, "--schema", schema,
               "web", "--port", str(port), *options]
    environment = {k: v for k, v in os.environ.items() if not k.startswith("GOLEMQ_WEB_")}
    proc = subprocess.Popen(command, env={**environment, **(env or {})}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _healthy(url) or proc.poll() is not None, timeout=30)
        assert proc.poll() is None, proc.communicate()[0]
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
