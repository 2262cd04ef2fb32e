"""The web dashboard: an ASGI app to see and operate a golemq-pg queue.

``create_app(store)`` returns a Starlette application (``pip install 'golemq-pg[web]'``)
that ``golemq-pg web`` serves with uvicorn and that mounts under a path prefix in a
FastAPI or Starlette application. It talks to the store's ``JobStore`` port only, so it
works on ``PostgresStore`` and ``InMemoryStore`` alike. Routes, options and security rules:
README.md, section "Web dashboard".
"""

from golemq_pg.web._app import create_app

__all__ = ["create_app"]
