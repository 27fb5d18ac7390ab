"""The parent's side of one job's workers: start each worker process, pass its results on as it writes them, stop
it on a timeout or an interrupt; runners in other languages in a worker's place; and the measuring environments
workers run in, one per version spec."""
