"""One raw driver round trip per store, equivalent to one recorded step.

``durable_bench.raw.<store>`` exposes ``raw_op(testbed)``: an async context manager
yielding ``op(i)``, which performs one such round trip and is safe to call from many tasks
at once.
"""
