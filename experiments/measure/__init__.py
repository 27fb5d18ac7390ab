"""The measuring core: what runs inside a worker (`python -m experiments.measure.worker`): timing, profiling,
statistics, the framework backends, FLOPs, calibrated peaks, the machine meter and check, the environment record;
and, on the same statistics in the parent, a point's reading (`reading`: its processes merged and judged). Imports
nothing above `common`."""
