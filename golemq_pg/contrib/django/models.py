"""No models: golemq-pg's tables are its own (in its schema, by its own migrations).

The module exists because Django sends ``post_migrate`` only for apps that have one, and
``apps.py`` applies golemq-pg's migrations on that signal.
"""
