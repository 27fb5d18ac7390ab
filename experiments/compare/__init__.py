"""Comparisons as the commands make them, taking plain values (never a command's arguments): a paired sweep along one
axis and its verdicts (`paired`), what `versions` and `bisect` share across environments (`environments`), a point's
history along an axis (`history`), `versions`' measurement and `bisect`'s search (`bisection`). Below the commands
(`cli`), above the sweep."""
