"""durable_redis."""
