"""Checks of nnbench itself and of the machine, each an `nnbench` command: agree (against other timers),
calibrate (the interval's coverage), overhead (the harness's cost), gpucheck (the GPU path)."""
