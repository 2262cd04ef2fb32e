"""``python -m golemq_pg.cli``: the ``golemq-pg`` command (how ``worker --processes N``
starts its children)."""

import sys

from golemq_pg.cli import main

sys.exit(main())
