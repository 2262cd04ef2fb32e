"""Plain helpers of the test suite (no fixtures, no tests): import them by module path,
e.g. ``from tests.support.waiting import wait_until``. See tests/README.md."""
