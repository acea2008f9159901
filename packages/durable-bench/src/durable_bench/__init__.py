"""durable_bench."""
