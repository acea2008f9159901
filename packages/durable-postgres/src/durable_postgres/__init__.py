"""durable_postgres."""
