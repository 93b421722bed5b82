"""wdrbo-dist: a distributed study runner for Wasserstein distributionally robust BO."""

__version__ = "0.23.0"
