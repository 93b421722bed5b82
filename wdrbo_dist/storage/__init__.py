"""Storage layer: the canonical store of a study's results on disk.

A run's files, atomic writes, the compacted dataset, the output folder and its lock, which runs are
finished, integrity checks. May import the study spec and the run; never MLflow or the backends.
"""
