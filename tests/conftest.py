"""The suite's fixtures live in plugin modules (tests/plugins/), loaded here; plain helpers
live in tests/support/. tests/README.md says where a new test, fixture or helper goes."""

pytest_plugins = [
    "tests.plugins.database",
    "tests.plugins.faults",
    "tests.plugins.ledgers",
    "tests.plugins.web",
]
