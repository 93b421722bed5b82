"""Acquisition layer: one module per method, the optimiser (method §1.6) and the registry (`registry`).

May import problems and models; DRBO-MMD's numerics live in the `mmd` subpackage. Knows no run, file or MLflow.
"""
