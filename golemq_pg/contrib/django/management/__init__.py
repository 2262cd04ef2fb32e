"""Management commands of ``golemq_pg.contrib.django``."""
