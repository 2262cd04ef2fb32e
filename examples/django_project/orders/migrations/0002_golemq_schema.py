"""The queue's own schema, applied by ``manage.py migrate`` (and so by Django's test runner).

golemq-pg keeps its own migration ledger in its schema, so this step is idempotent: after
upgrading golemq-pg, add a migration like this one (or run ``golemq-pg migrate``) to apply
the new version's migrations.
"""

from typing import Any

from django.db import migrations


def apply_queue_schema(apps: Any, schema_editor: Any) -> None:
    """Create or upgrade the golemq schema (on the store's own connection, committed apart
    from this Django migration: golemq-pg's migrations manage their own transactions)."""
    from shop.jobqueue import get_store  # noqa: PLC0415 - not at import: settings first

    get_store().migrate()


class Migration(migrations.Migration):
    """Apply golemq-pg's migrations to the project's database."""

    dependencies = (("orders", "0001_initial"),)

    # Reversing leaves the queue schema (and its jobs) in place.
    operations = (migrations.RunPython(apply_queue_schema, migrations.RunPython.noop),)
