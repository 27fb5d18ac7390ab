"""The Hydra control, in the parent: the command line validated before Hydra starts, the preflight that turns a
config into a `Job`, the sweep's callbacks and state, one job end to end, how a sweep ends, and interrupts."""
