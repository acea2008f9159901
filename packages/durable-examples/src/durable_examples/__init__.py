"""durable_examples."""
