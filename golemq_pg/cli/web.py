"""``golemq-pg web``: serve the dashboard (``golemq_pg.web``) with uvicorn.

Basic auth comes from ``GOLEMQ_WEB_USER`` / ``GOLEMQ_WEB_PASSWORD`` (both or neither);
binding an address that is not loopback without it is refused (one line, exit 2) unless
``--insecure-no-auth``.

The ``Host`` names it answers (any other gets 400: DNS rebinding): the loopback names, the
address it binds, and each ``--allowed-host``. Bound to every interface (``0.0.0.0``,
``::``) it also answers any IP address literal (a literal cannot be rebound: only a name
can) and this machine's host name and fully qualified name, which is how such a dashboard
is reached; a DNS name of its own (a proxy's, a load balancer's) takes ``--allowed-host``.
"""

from __future__ import annotations

import ipaddress
import os
import socket

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


#: The addresses that bind every interface.
WILDCARD_BINDS = frozenset({"0.0.0.0", "::", "[::]", ""})  # noqa: S104 - names, not a bind


def allowed_hosts(bind: str, extra: tuple[str, ...]) -> list[str]:
    """The ``Host`` names a dashboard bound to ``bind`` answers (see the module docstring)."""
    hosts = ["localhost", "127.0.0.1", "::1"]
    bind = bind.strip()
    if bind in WILDCARD_BINDS:
        hosts += ["0.0.0.0/0", "::/0", socket.gethostname(), socket.getfqdn()]
    else:
        hosts.append(bind)
    hosts += extra
    return list(dict.fromkeys(h for h in hosts if h))


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
@click.option("--allowed-host", "extra_hosts", multiple=True, metavar="NAME",
              help="Also answer this Host name (repeatable; '*.example.com', an address, "
              "a network such as 10.0.0.0/8, or '*' for any). Others get 400.")
def web(
    host: str,
    port: int,
    read_only: bool,
    show_payloads: bool,
    insecure_no_auth: bool,
    extra_hosts: tuple[str, ...],
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
    hosts = allowed_hosts(host, extra_hosts)
    with open_store(click.get_current_context()) as store:
        try:
            app = create_app(store, read_only=read_only, show_payloads=show_payloads,
                             basic_auth=auth, allowed_hosts=hosts)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        click.echo(f"golemq-pg: dashboard on http://{host}:{port}/", err=True)
        names = ", ".join(h for h in hosts if "/" not in h)
        if host.strip() in WILDCARD_BINDS:
            names += ", any IP address"
        click.echo(f"golemq-pg: answering Host {names} (more: --allowed-host)", err=True)
        config = uvicorn.Config(app, host=host, port=port, log_level="warning",
                                access_log=False)
        uvicorn.Server(config).run()
