"""``golemq-pg web``: serve the dashboard (``golemq_pg.web``) with uvicorn.

Basic auth comes from ``GOLEMQ_WEB_USER`` / ``GOLEMQ_WEB_PASSWORD`` (both or neither);
binding an address that is not loopback without it is refused (one line, exit 2) unless
``--insecure-no-auth``.
"""

from __future__ import annotations

import ipaddress
import os

import click

from golemq_pg.cli.base import db_options, open_store


def is_loopback(host: str) -> bool:
    """Whether ``host`` only listens on this machine (127.0.0.0/8, ::1, localhost)."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


def credentials() -> tuple[str, str] | None:
    """``(user, password)`` from the environment, None when neither is set."""
    user = os.environ.get("GOLEMQ_WEB_USER", "")
    password = os.environ.get("GOLEMQ_WEB_PASSWORD", "")
    if not user and not password:
        return None
    if not user or not password:
        raise click.UsageError("set both GOLEMQ_WEB_USER and GOLEMQ_WEB_PASSWORD, or neither")
    return user, password


@click.command("web")
@db_options
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@click.option("--read-only", is_flag=True, help="Show everything, refuse every action.")
@click.option("--show-payloads", is_flag=True, help="Show job payloads (hidden otherwise).")
@click.option("--insecure-no-auth", is_flag=True,
              help="Allow a non-loopback address without basic auth.")
def web(
    host: str, port: int, read_only: bool, show_payloads: bool, insecure_no_auth: bool
) -> None:
    """Serve the web dashboard (basic auth from GOLEMQ_WEB_USER / GOLEMQ_WEB_PASSWORD)."""
    auth = credentials()
    if auth is None and not is_loopback(host) and not insecure_no_auth:
        raise click.UsageError(
            f"refusing to serve {host} without auth: set GOLEMQ_WEB_USER and "
            "GOLEMQ_WEB_PASSWORD, bind 127.0.0.1, or pass --insecure-no-auth"
        )
    try:
        import uvicorn  # noqa: PLC0415 - the web extra is optional

        from golemq_pg.web import create_app  # noqa: PLC0415
    except ImportError:
        raise click.ClickException(
            "the dashboard needs the web extra: pip install 'golemq-pg[web]'"
        ) from None
    with open_store(click.get_current_context()) as store:
        app = create_app(
            store, read_only=read_only, show_payloads=show_payloads, basic_auth=auth
        )
        click.echo(f"golemq-pg: dashboard on http://{host}:{port}/", err=True)
        config = uvicorn.Config(app, host=host, port=port, log_level="warning",
                                access_log=False)
        uvicorn.Server(config).run()
