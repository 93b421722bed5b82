"""Loading a study: every run's row and curve are what its own records give, whether the run is
in its own files or compacted, loaded alone or with thousands of others."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.analysis.fakes import fill_store, make_study
from wdrbo_dist.analysis.load import RUN_TIMES, Metric, load_study


def one_run(records: pd.DataFrame, wall: float, metric: Metric) -> tuple[dict[str, float], pd.DataFrame]:
    """The oracle: one run's totals and curve, computed from its records alone."""
    frame = records.sort_values("step")
    keep = np.ones(len(frame), bool) if metric.include_initial else ~frame["is_initial"].to_numpy(bool)
    r = frame[metric.column].to_numpy(float)[keep]
    totals = {"final_cumulative_regret": float(np.cumsum(r)[-1]) if r.size else np.nan,
              "final_regret": float(r[-1]) if r.size else np.nan, "wall_time_s": wall, "n_steps": len(frame),
              **{c: float(frame[c].sum()) for c in RUN_TIMES}}
    curve = pd.DataFrame({"step": frame["step"].to_numpy(int)[keep], "regret": r, "cumulative_regret": np.cumsum(r),
                          "elapsed_s": np.cumsum(frame["time_step_s"].to_numpy(float))[keep]})
    return totals, curve


@pytest.mark.parametrize("metric", [Metric(), Metric("regret_reference", include_initial=False)])
def test_each_run_loads_as_its_own_records_give_loose_or_compacted(tmp_path, metric) -> None:
    study = make_study(tmp_path, ["ackley", "newsvendor"], ["gp-ucb", "erbo"], seeds=list(range(12)), evaluations=7)
    rng = np.random.default_rng(5)
    regrets = {spec.run_key: rng.random(7) * 10.0 ** rng.integers(-8, 3) for spec in study.runs}
    regrets[study.runs[3].run_key] = "fail"
    regrets[study.runs[4].run_key] = None  # missing
    store = fill_store(study, lambda spec: regrets[spec.run_key], wall_time=None)
    loose = sorted(store.loose_keys())
    store.compact()  # every finished run compacted ...
    for spec in study.runs[::5]:  # ... and some saved again in their own files
        if isinstance(regrets[spec.run_key], np.ndarray):
            fill_store(make_study(tmp_path, [spec.problem], [spec.algorithm], [spec.seed], evaluations=7),
                       lambda s: regrets[s.run_key])
    assert len(loose) == len(study.runs) - 2 and store.compacted.keys() and store.loose_keys()
    data = load_study([study], metric)
    runs = data.runs.set_index("run_key")
    for spec in study.runs:
        row = runs.loc[spec.run_key]
        if not isinstance(regrets[spec.run_key], np.ndarray):
            assert row["status"] == ("failed" if regrets[spec.run_key] == "fail" else "missing")
            continue
        records = store.read_records(spec.run_key)
        totals, curve = one_run(records, float(records["time_step_s"].sum()), metric)
        assert row["status"] == "finished"
        assert {k: row[k] for k in totals} == totals  # to the bit
        mine = data.steps[(data.steps["problem"] == spec.problem) & (data.steps["algorithm"] == spec.algorithm)
                          & (data.steps["seed"] == spec.seed)]
        pd.testing.assert_frame_equal(mine[list(curve.columns)].reset_index(drop=True), curve, check_exact=True)
    # The steps come run by run in the study's order, each run's steps in order.
    order = [(s.problem, s.algorithm, s.seed) for s in study.runs if isinstance(regrets[s.run_key], np.ndarray)]
    seen = list(dict.fromkeys(zip(data.steps["problem"], data.steps["algorithm"], data.steps["seed"])))
    assert seen == order and data.steps["step"].groupby([data.steps["problem"], data.steps["algorithm"],
                                                           data.steps["seed"]]).is_monotonic_increasing.all()
