"""What a user reads: comparison tables, a sweep's answer, seed-000-style plots, report pages, verdicts and change
points along an axis (versions, dates, commits), and a store's medians as seed 000's lines. Takes runs as pandas
DataFrames; no MLflow here."""
