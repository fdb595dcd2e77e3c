"""Statistics as values: sums over rows that merge (+), remove (−) and round-trip to disk."""

from tgpflow.stats.moments import Moments
from tgpflow.stats.tgp import TGPStats

__all__ = ["Moments", "TGPStats"]
