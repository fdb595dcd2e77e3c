"""Closed-form solves after the pass (float64, with documented fallbacks)."""
