"""Where the browser tests find Chromium and put their screenshots."""

from __future__ import annotations

import os
from pathlib import Path

#: Debian's chromium unless GOLEMQ_CHROMIUM names another binary.
CHROMIUM = os.environ.get("GOLEMQ_CHROMIUM", "/usr/bin/chromium")
#: The browser tests' screenshots (not committed): tests/artifacts/browser/.
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts" / "browser"
