"""``golemq_worker``."""
