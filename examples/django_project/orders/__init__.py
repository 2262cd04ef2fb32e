"""Orders: a model, a service that enqueues inside the order's transaction, and its jobs."""
