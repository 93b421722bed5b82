"""wdrbo-dist: a distributed study runner for Wasserstein distributionally robust BO."""

from wdrbo_dist.portable import set_portable_environment

set_portable_environment()  # before NumPy is imported: records that do not depend on the CPU

__version__ = "0.21.0"
