"""SQL files shipped with golemq-pg: migrations/ and named queries/."""
