"""Comparisons as the commands make them: a paired sweep along one axis, run whole, and its verdicts read back typed
(`paired`). Below the commands (`cli`), above the sweep."""
