"""Models layer: the GP surrogate (kernel, posterior, MAP fit, context-set routes, compiled kernels)
and the run's numerical settings (`settings`: routes by device). Knows no problem and no acquisition.
"""
