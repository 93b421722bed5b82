"""The run layer: one algorithm x problem x seed, from its spec to its records.

`spec` (RunSpec, RunResult, validation), `records` (the columns every run stores), `loop`
(`run_one`, the BO loop). It may import problems, models and acquisition; never storage,
execution, tracking or the study.
"""
