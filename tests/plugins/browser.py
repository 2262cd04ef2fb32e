"""The dashboard's browser fixture: a page of a real headless Chromium (Debian's package,
driven by Playwright through ``executable_path``, no browser download). Skipped where no
Chromium is installed, unless ``GOLEMQ_REQUIRE_CHROMIUM`` is set (CI), where that fails."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.browser import CHROMIUM


@pytest.fixture
def browser_page() -> Iterator[Any]:
    """A 1280x900 page of a headless Chromium, closed after the test."""
    sync_api = pytest.importorskip("playwright.sync_api")
    if not shutil.which(CHROMIUM):
        if os.environ.get("GOLEMQ_REQUIRE_CHROMIUM"):
            pytest.fail(f"no Chromium at {CHROMIUM}")
        pytest.skip(f"no Chromium at {CHROMIUM} (.ci/run installs Debian's chromium)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
        )
        try:
            yield browser.new_page(viewport={"width": 1280, "height": 900})
        finally:
            browser.close()
