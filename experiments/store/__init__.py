"""Where results are kept: each point's record in the sweep dir first, then its MLflow run (`tracking` is the only
module that imports mlflow; `view`, how the store reads in MLflow's UI); the sweep dir's state file, resume's keys,
repairs and the selection syntax."""
