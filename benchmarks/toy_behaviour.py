"""What the general-setting toy's runs do (spec 4.9), read from studies' stores.

The analytic picture: ERBO maximises E under the centre N(0.5, 0.1^2), at x = 0, and pays
0.17358 per step under P* = N(0.6, 0.2^2); WDRBO's robust objective is maximised at
|x| = 0.240, almost the true optimum |x*| = 0.23875. Printed per study and algorithm (the
algorithm's label, with its options when a study sets any): the final cumulative regret
R_100, the mean instantaneous regret over each run's last 20 evaluations, the median |x| of
those decisions (mean ± SE over seeds), and the paired Wilcoxon test of R_100 against ERBO (seeds paired; ERBO's runs from any of the
studies given, its records do not depend on the study).

    .venv/bin/wdrbo-dist run configs/paper_general.yaml      # 30 runs, ~9 min on 2 cores
    .venv/bin/python benchmarks/toy_behaviour.py configs/paper_general.yaml [more configs ...]
"""

from __future__ import annotations

import argparse

import numpy as np

from wdrbo_dist.analysis.load import LATE_STEPS, late_regret
from wdrbo_dist.analysis.statistics import mean_se, paired_wilcoxon, significant_digits_format
from wdrbo_dist.config import load_study_config
from wdrbo_dist.store import ResultStore

TOY, LATE = "toy-general", LATE_STEPS


def fmt(values: list[float]) -> str:
    summary = mean_se(values)
    return significant_digits_format(summary.mean, summary.se)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("configs", nargs="+", help="study YAML files with toy-general runs")
    args = parser.parse_args()
    print(f"| study | algorithm | seeds | R_100 | regret per step, last {LATE} | median abs(x), last {LATE} | "
          "vs ERBO: W/T/L, Wilcoxon p |")
    print("|---|---|---|---|---|---|---|")
    rows: list[tuple[str, str, dict[int, tuple[float, float, float]]]] = []
    for path in args.configs:
        study = load_study_config(path)
        store = ResultStore(study.output_dir)
        finished = store.finished_keys()
        by_label: dict[str, dict[int, tuple[float, float, float]]] = {}
        for spec in study.runs:
            if spec.problem != TOY or spec.run_key not in finished:
                continue
            records = store.read_records(spec.run_key).sort_values("step")
            late = records.iloc[-LATE:]
            label = spec.algorithm_label + "".join(f" {k}={v}" for k, v in spec.options)
            by_label.setdefault(label, {})[spec.seed] = (
                float(records["cumulative_regret"].iloc[-1]),
                late_regret(records["regret"]),
                float(np.median(np.abs(late["x_0"]))),
            )
        rows += [(study.name, label, runs) for label, runs in by_label.items()]
    erbo = {seed: v for name, label, runs in rows if label == "erbo" for seed, v in runs.items()}
    for name, label, runs in rows:
        seeds = sorted(runs)
        columns = [[runs[s][i] for s in seeds] for i in range(3)]
        test = "-"
        shared = [s for s in seeds if s in erbo]
        if label != "erbo" and len(shared) >= 2:
            result = paired_wilcoxon([runs[s][0] for s in shared], [erbo[s][0] for s in shared])
            test = f"{result.wins}/{result.ties}/{result.losses}, p = {result.pvalue:.4f}"
        print(f"| {name} | {label} | {len(seeds)} | {fmt(columns[0])} | {fmt(columns[1])} | "
              f"{fmt(columns[2])} | {test} |")
    print("\nmean ± SE over seeds; W/T/L: seeds where this algorithm's R_100 is lower / tied / higher than ERBO's")


if __name__ == "__main__":
    main()
