"""Checks of nnbench itself and of the machine, each an `nnbench` command: agree (against other timers),
calibrate (the interval's coverage, the verdict's false alarms and detection), overhead (the harness's cost),
devicecheck (an accelerator's path; gpucheck, its GPU's); and planted, a regression planted in a package of known
versions."""
