"""MLflow tracking: one experiment per study, a parent run holding the config, a child run per run.

The store (parquet) is the canonical data; MLflow is a view of it that the driver keeps in
step. `connection`: reaching a tracking URI (checks, probes, bounded retries, lookups);
`child_runs`: what a run's child run holds, logged by a worker or by the driver;
`study_tracker`: the driver's experiment, parent run, reconciliation and backlog. Publishing a
report to MLflow lives with the report (`analysis.mlflow_report`).
"""
