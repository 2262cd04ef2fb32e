"""The suite's fixtures live in plugin modules (tests/plugins/), loaded here; plain helpers
live in tests/support/. tests/README.md says where a new test, fixture or helper goes."""

pytest_plugins = [
    "tests.plugins.async_stores",
    "tests.plugins.browser",
    "tests.plugins.clusters",
    "tests.plugins.database",
    "tests.plugins.faults",
    "tests.plugins.ledgers",
    # pytest-django's settings declared when the examples extra is not installed.
    "tests.plugins.optional_extras",
    # pytester: the tests of golemq_pg.pytest_plugin run a user's test file.
    "pytester",
    "tests.plugins.pgbouncer",
    "tests.plugins.plans",
    "tests.plugins.web",
]
