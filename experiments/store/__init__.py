"""Where results are kept: each point's record in the sweep dir first, then its MLflow run (`tracking` is the only
module that imports mlflow); the sweep dir's state file, resume's keys, repairs and the selection syntax."""
