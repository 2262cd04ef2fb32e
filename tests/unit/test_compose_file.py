"""docker-compose.yml and what it refers to: the Dockerfile it builds, the files it mounts,
the services it depends on, the Prometheus scrape target and the Grafana provisioning, and
the golemq-pg commands its services run (parsed by the CLI's own click commands). Docker
does not run here: the file is read with PyYAML, and checked by `docker compose config` (or
`docker-compose config`) where a compose tool is installed."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from golemq_pg.cli import cli

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
IMAGE = "golemq-pg:local"
#: Every interface of a container (what a service reached from another container binds).
EVERY_INTERFACE = "0.0.0.0"  # noqa: S104 - a value compared, nothing is bound
_VARIABLE = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)(:-([^}]*))?\}")


def compose() -> dict[str, Any]:
    """docker-compose.yml as data (its anchors and merge keys resolved by PyYAML)."""
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return data


def services() -> dict[str, dict[str, Any]]:
    """The services by name."""
    found: dict[str, dict[str, Any]] = compose()["services"]
    return found


def interpolated(value: str) -> str:
    """``value`` as compose runs it with no variable set: each ``${NAME:-default}`` is its
    default. A variable without a default fails: every one the file uses must have one."""

    def default(match: re.Match[str]) -> str:
        assert match.group(2) is not None, f"${{{match.group(1)}}} has no default"
        return match.group(3)

    assert "$" not in _VARIABLE.sub("", value), value  # no $NAME form
    return _VARIABLE.sub(default, value)


def command(service: dict[str, Any]) -> list[str]:
    """The service's command as an argument list (the image's entry point is golemq-pg)."""
    raw = service["command"]
    assert isinstance(raw, list), "a command is a list: no shell in between"
    return [interpolated(str(arg)) for arg in raw]


def parse(args: list[str]) -> click.Context:
    """``golemq-pg ARGS`` parsed (not run) by the CLI's own command."""
    name, *rest = args
    assert name in cli.commands, f"golemq-pg has no command {name!r}"
    return cli.commands[name].make_context(name, rest)


def mounts(service: dict[str, Any]) -> list[tuple[Path, str]]:
    """The service's bind mounts of the repository: (host path, container path)."""
    found = []
    for volume in service.get("volumes", []):
        source, target, *_mode = volume.split(":")
        if source.startswith("."):
            found.append(((ROOT / source).resolve(), target))
    return found


def test_the_stack_has_its_services_and_one_image() -> None:
    found = services()
    assert set(found) == {"db", "migrate", "worker", "dashboard", "prometheus", "grafana"}
    built = {name for name, s in found.items() if s.get("image") == IMAGE}
    assert built == {"migrate", "worker", "dashboard"}
    for name in built:
        assert found[name]["build"] == {"context": ".", "dockerfile": "Dockerfile"}, name
        assert found[name]["environment"]["GOLEMQ_DSN"].endswith("@db:5432/golemq"), name
    assert found["db"]["image"] == "postgres:15"
    assert "pg_isready" in " ".join(found["db"]["healthcheck"]["test"])


def test_the_dockerfile_installs_the_package_for_a_user_not_root() -> None:
    (context,) = {s["build"]["context"] for s in services().values() if "build" in s}
    dockerfile = ROOT / context / "Dockerfile"
    lines = [line.strip() for line in dockerfile.read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    assert lines[0] == "FROM python:3.12-slim"
    copied = [line.split()[1:-1] for line in lines if line.startswith("COPY ")]
    assert copied
    for sources in copied:
        for source in sources:
            assert (ROOT / context / source).exists(), source
    install = next(line for line in lines if line.startswith("RUN pip install"))
    assert '".[web,metrics]"' in install
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users
    assert users[-1] not in ("root", "0")
    assert 'ENTRYPOINT ["golemq-pg"]' in lines
    ignored = (ROOT / context / ".dockerignore").read_text().splitlines()
    for sources in copied:  # .dockerignore keeps what the build copies
        for source in sources:
            assert f"!{source.rstrip('/')}" in ignored, source


def test_every_mounted_file_and_dependency_exists() -> None:
    found = services()
    for name, service in found.items():
        for source, _target in mounts(service):
            assert source.exists(), (name, source)
            assert ROOT in source.parents, (name, source)  # nothing outside the checkout
        depends = service.get("depends_on", [])
        for other in depends:  # a list, or a mapping with conditions
            assert other in found, (name, other)
            assert other != name
        if isinstance(depends, dict):
            for other, condition in depends.items():
                assert condition["condition"] in {"service_started", "service_healthy",
                                                  "service_completed_successfully"}
                if condition["condition"] == "service_healthy":
                    assert "healthcheck" in found[other], other
    # the worker and the dashboard start once the migrations are in
    for name in ("worker", "dashboard"):
        assert found[name]["depends_on"]["migrate"]["condition"] \
            == "service_completed_successfully"
    assert found["migrate"]["depends_on"]["db"]["condition"] == "service_healthy"


def test_every_port_is_published_on_loopback_only() -> None:
    for name, service in services().items():
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), (name, port)


def test_the_services_run_real_golemq_pg_commands() -> None:
    found = services()
    assert command(found["migrate"]) == ["migrate"]
    parse(command(found["migrate"]))
    worker = parse(command(found["worker"])).params
    assert worker["target"] == "golemq_pg.cli.demo:build_worker"
    assert (worker["metrics_port"], worker["metrics_host"]) == (9464, EVERY_INTERFACE)
    assert worker["processes"] == 1
    web = parse(command(found["dashboard"])).params
    assert web["host"] == EVERY_INTERFACE
    # bound to every interface of its container: auth from the environment, else the
    # explicit (local-only) opt-out; never a password written in the file
    assert web["insecure_no_auth"]
    environment = found["dashboard"]["environment"]
    assert environment["GOLEMQ_WEB_USER"] == "${GOLEMQ_WEB_USER:-}"
    assert environment["GOLEMQ_WEB_PASSWORD"] == "${GOLEMQ_WEB_PASSWORD:-}"  # noqa: S105
    published = [p.rsplit(":", 1)[1] for p in found["dashboard"]["ports"]]
    assert published == [str(web["port"])]


def test_a_wrong_command_or_option_is_caught() -> None:
    with pytest.raises(AssertionError, match="no command"):
        parse(["migrat"])
    with pytest.raises(click.UsageError):
        parse(["worker", "app:worker", "--metrics-hots", EVERY_INTERFACE])
    with pytest.raises(AssertionError, match="no default"):
        interpolated("${WORKER_TARGET}")


def test_prometheus_scrapes_the_worker_metrics_port() -> None:
    found = services()
    ((config, target),) = mounts(found["prometheus"])
    assert target == "/etc/prometheus/prometheus.yml"
    scrape = yaml.safe_load(config.read_text())["scrape_configs"]
    targets = [t for job in scrape for static in job["static_configs"] for t in static["targets"]]
    worker = parse(command(found["worker"])).params
    assert targets == [f"worker:{worker['metrics_port']}"]
    assert all(job.get("metrics_path", "/metrics") == "/metrics" for job in scrape)


def test_grafana_provisions_prometheus_and_the_shipped_dashboard() -> None:
    found = services()
    mounted = dict(mounts(found["grafana"]))
    provisioning = next(src for src, dst in mounted.items() if dst == "/etc/grafana/provisioning")
    (datasource,) = yaml.safe_load(
        (provisioning / "datasources" / "prometheus.yml").read_text())["datasources"]
    assert datasource["type"] == "prometheus"
    assert datasource["isDefault"]
    published = found["prometheus"]["ports"][0].rsplit(":", 1)[1]
    assert datasource["url"] == f"http://prometheus:{published}"
    (provider,) = yaml.safe_load(
        (provisioning / "dashboards" / "golemq.yml").read_text())["providers"]
    assert provider["type"] == "file"
    dashboards = [src for src, dst in mounted.items()
                  if Path(dst).parent == Path(provider["options"]["path"])]
    assert dashboards == [ROOT / "docs" / "grafana-dashboard.json"]


def compose_tool() -> list[str] | None:
    """A compose command that can read the file without a Docker daemon, or None."""
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True,
                                 check=False, timeout=30).returncode == 0:
        return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    return [legacy] if legacy else None


def test_compose_accepts_the_file() -> None:
    tool = compose_tool()
    if tool is None:
        pytest.skip("no docker compose / docker-compose here (apt-get install docker-compose)")
    result = subprocess.run([*tool, "-f", str(COMPOSE), "config", "--quiet"],
                            capture_output=True, text=True, check=False, timeout=60,
                            cwd=ROOT)
    assert result.returncode == 0, result.stderr
