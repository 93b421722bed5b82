"""Analysis layer: statistics, tables, figures and the HTML report of a study, read from its store.

May import storage, run, acquisition and problems; never MLflow or tracking (tracking publishes what it computes).
"""
