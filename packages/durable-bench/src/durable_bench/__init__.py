"""Benchmarks for durable stores: ``hatch run bench``.

Speed is measured here and never asserted by a test. Every store is measured against a
raw round trip through its own driver, taken in the same run on the same connection
settings, because the honest question is what ``durable`` adds on top of the store, not
how fast the store is.
"""
