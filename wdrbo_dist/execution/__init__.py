"""Execution layer: how runs are scheduled: `serial`, `local` (process pool) and `ray` backends,
Ray Jobs `submit`, thread settings and the allocator. May import the run; knows no MLflow, no files.
"""
