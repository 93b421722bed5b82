"""MLflow tracking: one experiment per study, a parent run holding the config, a child run per run.

The store (parquet) is the canonical data; MLflow is a view of it that the driver keeps in
step. `connection`: reaching a tracking URI (checks, probes, bounded retries, lookups);
`child_runs`: what a run's child run holds, logged by a worker or by the driver;
`study_tracker`: the driver's experiment, parent run, reconciliation and backlog. `views`: the MLflow
UI's saved views; `publish`: the report's files and aggregate runs, from what analysis computed.
May import storage, the study spec and the run; knows no Ray and no analysis.
"""
