"""Integrations with frameworks (``golemq_pg.contrib.django``): each imports its framework,
which golemq-pg itself never needs."""
