"""A FastAPI service for documents: each new document is summarized by a golemq-pg job."""
