"""What every layer shares, on both sides of the process boundary: the config schema and its names, the typed
`Job`, the worker protocol, seed 000's TIMING lines, and errors with their exit codes."""
