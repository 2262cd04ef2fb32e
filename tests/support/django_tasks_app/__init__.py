"""The Django app of the Django backend's tests: its ``tasks`` module is what
``golemq_worker`` discovers."""
