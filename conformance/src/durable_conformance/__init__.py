"""The durable conformance suite: certifies a store with ``pytest --durable-store=NAME``.

Importing this package imports nothing from ``durable``: pytest loads the plugin in every
run, and a run that does not certify anything must not pay for, or break on, the store
machinery.
"""

import importlib.metadata

from durable_conformance.requirements import Requirement, requirement

try:
    __version__ = importlib.metadata.version("durable-conformance")
except importlib.metadata.PackageNotFoundError:  # running from a source tree
    __version__ = "0+unknown"

__all__ = ["Requirement", "__version__", "requirement"]
