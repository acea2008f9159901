"""The durable conformance suite: certifies a store with ``pytest --durable-store=NAME``."""
