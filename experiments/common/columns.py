"""The names of a point's run in MLflow besides the worker's own (`common.protocol`: STATS, METRICS, PARTS) and a
paired judgement's (`stats.paired.PAIRED`): its params, the per-op metrics the parent derives, and the flags. The
store writes them and the reports read them, so they live here, below both; docs/reference.md says what each
means."""

# The params of every point run, besides the flattened config; compare and report select and group by them.
PARAMS = ("framework", "compile", "mode", "model", "precision", "batch_size", "device", "device_requested", "ops",
          "param_count", "repeat", "memory_format", "sync")
# Per op, from the FLOP count, the median and the peaks: `measure.reading.OpReading` has a field of each name.
DERIVED = ("achieved_tflops", "mfu", "mfu_vendor")
# Tags ("true"/"false") that say a point's numbers need care: other processes used the CPU; a re-run may read far off.
FLAGS = ("noisy", "unstable", "oversubscribed")
