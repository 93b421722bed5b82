"""Driver layer: how a study runs: the plan (what is missing) and the driver (lock, plan, map over a
backend, store, track). The one place that imports storage, execution and tracking together.
"""
