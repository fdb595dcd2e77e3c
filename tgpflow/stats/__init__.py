"""Statistics as values: sums over rows that merge (+), remove (−) and round-trip to disk.

The moments every family shares, and the algebra base of all of them (``AdditiveStats``: +, −, ``scaled``,
arrays, sizeof), are in :mod:`tgpflow.core` (:mod:`~tgpflow.core.moments`, :mod:`~tgpflow.core.summable`);
:mod:`~tgpflow.stats.stored` adds save/load, which needs the artifact writer of :mod:`tgpflow.io`.
"""

from tgpflow.stats.tgp import TGPStats

__all__ = ["TGPStats"]
