"""durable_sqlite."""
