"""Before any test module imports NumPy, as the CLI does: NumPy's AVX-512 kernels off
(wdrbo_dist/portable.py), so that the pinned records hold on every CPU."""

from wdrbo_dist.portable import set_portable_environment

set_portable_environment()
