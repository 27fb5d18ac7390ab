"""What a user reads: comparison tables, seed-000-style plots, report pages, verdicts across versions, and a
store's medians as seed 000's lines. Takes runs as pandas DataFrames; no MLflow here."""
