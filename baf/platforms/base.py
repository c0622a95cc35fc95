"""The platform interface, importable from where adapters have always imported it.

It is defined in :mod:`baf.core.platform`: the runtime calls it, and core never imports upward.
"""

from baf.core.platform import Platform

__all__ = ["Platform"]
