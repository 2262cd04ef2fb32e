"""``golemq-pg web``: the refusal to serve a non-loopback address without auth, the auth
environment, and serving with basic auth (the browser test drives the unauthenticated one)."""

from __future__ import annotations

import base64
import socket

import httpx
import pytest

from golemq_pg import PostgresStore
from golemq_pg.cli.web import allowed_hosts, is_loopback
from tests.support.cli import assert_clean_failure, run_cli
from tests.support.web_server import web_process


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.10", "dash.example.com"])  # noqa: S104
def test_non_loopback_bind_without_auth_is_refused(pg_dsn: str, host: str) -> None:
    result = run_cli("web", "--host", host, dsn=pg_dsn,
                     env={"GOLEMQ_WEB_USER": "", "GOLEMQ_WEB_PASSWORD": ""})
    assert_clean_failure(result, 2)
    assert "--insecure-no-auth" in result.stderr


def test_half_set_credentials_are_refused(pg_dsn: str) -> None:
    result = run_cli("web", dsn=pg_dsn, env={"GOLEMQ_WEB_USER": "ops", "GOLEMQ_WEB_PASSWORD": ""})
    assert_clean_failure(result, 2)
    assert "GOLEMQ_WEB_PASSWORD" in result.stderr


def test_loopback_addresses_are_recognised() -> None:
    assert all(map(is_loopback, ["127.0.0.1", "127.3.4.5", "::1", "[::1]", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "10.0.0.1", "example.com"]))  # noqa: S104


def test_the_hosts_answered_are_loopback_the_bound_host_and_allowed_hosts() -> None:
    assert allowed_hosts("127.0.0.1", ()) == ["localhost", "127.0.0.1", "::1"]
    assert allowed_hosts("192.0.2.10", ("queue.example.com",)) == [
        "localhost", "127.0.0.1", "::1", "192.0.2.10", "queue.example.com"]
    assert "dash.example.com" in allowed_hosts("dash.example.com", ())
    # Every interface: any address literal (it cannot be rebound) and this machine's names.
    for wildcard in ("0.0.0.0", "::"):  # noqa: S104
        hosts = allowed_hosts(wildcard, ())
        assert {"0.0.0.0/0", "::/0", socket.gethostname()} <= set(hosts)
        assert wildcard not in hosts


def test_served_with_basic_auth_from_the_environment(
    pg_store: PostgresStore, pg_dsn: str, schema: str
) -> None:
    with web_process(pg_dsn, schema, env={"GOLEMQ_WEB_USER": "ops",
                                          "GOLEMQ_WEB_PASSWORD": "pw"}) as url:
        assert httpx.get(url + "/").status_code == 401
        token = base64.b64encode(b"ops:pw").decode()
        answer = httpx.get(url + "/", headers={"authorization": "Basic " + token})
        assert answer.status_code == 200
        assert "Overview" in answer.text
        # DNS rebinding: the right credentials under a name the server was not bound to.
        rebound = {"authorization": "Basic " + token, "host": "attacker.example"}
        assert httpx.get(url + "/", headers=rebound).status_code == 400
