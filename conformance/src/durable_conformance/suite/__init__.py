"""The conformance suite: one module a concept, one test (at least) a requirement.

The plugin collects every public module here (not pytest's file and function patterns, so
a project's own ``python_files`` setting cannot hide a test), parametrizes each test by
store, and gates it by the capability its ``@requirement`` names. Modules whose names start
with an underscore hold what the tests share.
"""

READING_ORDER = (
    "claim",
    "fencing",
    "takeover",
    "record",
    "supply",
    "order",
    "append",
    "history",
    "operations",
    "discard",
    "lifecycle",
    "transact",
    "durability",
    "codec",
    "boundary",
    "isolation",
    "scheduler",
    "moves",
    "atomicity",
    "views",
    "dated",
    "prune",
    "run",
    "steps",
    "graph",
    "worker",
    "queues",
    "schedules",
    "children",
    "limits",
    "capabilities",
)
"""The order the suite runs and the table reads in: the claim and what it fences first, the
records, the scheduler, the moves across both, the run machinery on top, and what the store
declares last. A module not listed here runs after these, by name."""
