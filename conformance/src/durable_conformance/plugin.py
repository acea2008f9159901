"""The pytest plugin (being written; see issue 3)."""
