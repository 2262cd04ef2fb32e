"""docs/grafana-dashboard.json imports: valid JSON, every panel has queries, and every metric
a query names is one golemq_pg.metrics exports (and every exported family is on a panel)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from golemq_pg import InMemoryStore, Queue
from golemq_pg.metrics import PrometheusObserver, QueueCollector, exposition

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana-dashboard.json"
# a quoted string (label values, regexes), then the identifiers left outside them
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def exported_sample_names() -> set[str]:
    """The sample names a scrape of the observer and the collector shows."""
    registry = CollectorRegistry()
    observer = PrometheusObserver(registry)
    observer.count_transition("t", "started", None, 0.01)
    observer.count_transition("t", "succeeded", 0.002, None)
    store = InMemoryStore()
    Queue(store).add("t", {})
    registry.register(QueueCollector(store))
    text = exposition(registry)[0].decode()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


_NAME_MATCHER = re.compile(r'__name__\s*=~?\s*"([^"]*)"')


def metric_names(expr: str) -> set[str]:
    """The golemq_* metric names a PromQL expression reads, by name or by a ``__name__``
    matcher (an alternation of names: ``{__name__=~"a|b"}``)."""
    bare = _STRING.sub('""', expr)
    named = {name for name in _NAME.findall(bare) if name.startswith("golemq_")}
    for alternatives in _NAME_MATCHER.findall(expr):
        named |= {n for n in alternatives.split("|") if n.startswith("golemq_")}
    return named


def panels(node: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, rows' nested panels included."""
    found = []
    for panel in node.get("panels", []):
        found.append(panel)
        found.extend(panels(panel))
    return found


def test_the_dashboard_is_valid_json_with_queries_on_every_panel() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["title"]
    graphs = [p for p in panels(dashboard) if p["type"] != "row"]
    assert len(graphs) >= 8
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids))
    for panel in graphs:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert metric_names(target["expr"]), (panel["title"], target["expr"])


def test_every_query_names_an_exported_metric() -> None:
    exported = exported_sample_names()
    dashboard = json.loads(DASHBOARD.read_text())
    used: set[str] = set()
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            names = metric_names(target["expr"])
            assert names <= exported, (panel["title"], names - exported)
            used |= names
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            assert metric_names(variable["definition"]) <= exported
    # the dashboard shows every family: throughput, failures, both histograms, the gauges
    families = {re.sub(r"_(bucket|sum|count)$", "", name) for name in used}
    assert families >= {
        "golemq_jobs_total", "golemq_job_duration_seconds", "golemq_job_wait_seconds",
        "golemq_queue_jobs", "golemq_oldest_due_age_seconds", "golemq_workers",
        "golemq_paused",
    }


def test_the_type_variable_lists_types_only_enqueued() -> None:
    """A type whose jobs were only enqueued (no worker ran one, so no golemq_jobs_total
    series) is in the queue gauge: the variable reads both."""
    dashboard = json.loads(DASHBOARD.read_text())
    (variable,) = [v for v in dashboard["templating"]["list"] if v["name"] == "type"]
    assert variable["definition"] == variable["query"]["query"]
    assert variable["definition"].startswith("label_values(")
    assert variable["definition"].endswith(", type)")
    assert metric_names(variable["definition"]) == {"golemq_jobs_total", "golemq_queue_jobs"}
    store = InMemoryStore()
    Queue(store).add("only.enqueued", {})
    registry = CollectorRegistry()
    registry.register(QueueCollector(store))
    text = exposition(registry)[0].decode()
    typed = {s.name for f in text_string_to_metric_families(text) for s in f.samples
             if s.labels.get("type") == "only.enqueued"}
    assert "golemq_queue_jobs" in typed


def test_the_name_parser_sees_names_not_label_values() -> None:
    expr = ('histogram_quantile(0.95, sum by (le) (rate(golemq_job_wait_seconds_bucket'
            '{type=~"golemq_fake|x"}[$__rate_interval])))')
    assert metric_names(expr) == {"golemq_job_wait_seconds_bucket"}
    assert metric_names('label_values({__name__=~"golemq_a|golemq_b"}, type)') \
        == {"golemq_a", "golemq_b"}
