"""Measurements of the fault scenarios: printed, and appended to $GOLEMQ_FAULTS_REPORT."""

from __future__ import annotations

import json
import os
from typing import Any


def report(scenario: str, **metrics: Any) -> None:
    """Print one scenario's measurements; append them to $GOLEMQ_FAULTS_REPORT if set."""
    line = {"scenario": scenario, **metrics}
    print("FAULTS " + json.dumps(line, default=str))
    path = os.environ.get("GOLEMQ_FAULTS_REPORT")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(line, default=str) + "\n")


def env_seconds(name: str, default: float) -> float:
    """A duration knob from the environment (seconds)."""
    raw = os.environ.get(name)
    return float(raw) if raw else default
