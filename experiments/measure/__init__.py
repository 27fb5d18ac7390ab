"""What runs inside a worker (`python -m experiments.measure.worker`): timing, statistics, the framework backends,
FLOPs, calibrated peaks, the machine meter and the environment record. Imports nothing above `common`."""
