"""A validated study: what to run (problems x algorithms x seeds), with what, and where to put it.

`config` builds it from a study file; the driver, the tracker and the analysis read it. It
knows nothing of YAML or of how its runs execute.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wdrbo_dist.run.spec import OptionValue, RunSpec

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
NO_TRACKING = "none"
NAME_PATTERN = re.compile(r"[A-Za-z0-9_.-]+")
NAME_MAX_CHARS = 100  # a study name or a variant label: part of file and folder names
NAME_RULE = f"[A-Za-z0-9_.-]+ (1 to {NAME_MAX_CHARS} characters, not . or ..)"
def is_name(value: object) -> bool:
    """Whether `value` may name a study (a config's or a stored one): it becomes a folder's name."""
    return (isinstance(value, str) and len(value) <= NAME_MAX_CHARS and value not in (".", "..")
            and NAME_PATTERN.fullmatch(value) is not None)


@dataclass(frozen=True)
class Resources:
    """What one run of an algorithm asks the scheduler for (Ray task options)."""

    num_cpus: float = 1.0
    num_gpus: float = 0.0

    @property
    def threads(self) -> int:
        """Torch / OpenMP threads for a run: its whole CPUs, at least one."""
        return max(1, int(self.num_cpus))


@dataclass(frozen=True)
class AlgorithmSettings:
    """One algorithm of a study (or one variant of it): its options and resources."""

    name: str
    options: dict[str, OptionValue] = field(default_factory=dict)
    resources: Resources = Resources()
    variant: str = ""  # the label of a variant ("" when the study runs the algorithm once)

    @property
    def label(self) -> str:
        return self.variant or self.name


@dataclass(frozen=True)
class StudySpec:
    """A validated study: what to run (problems x algorithms x seeds) and where to put it."""

    name: str
    fidelity: str
    problems: list[str]
    algorithm_settings: list[AlgorithmSettings]
    seeds: list[int]
    evaluations: int = 100
    init_size: int = 5
    backend: str = "local"
    workers: int = 2
    tracking_uri: str = DEFAULT_TRACKING_URI
    output_dir: Path = Path("results")
    run_timeout_s: float | None = None  # a run past it is FAILED ("timed out after N s"); None: no limit
    description: str = ""
    source: Path | None = None  # the YAML file it came from
    raw: dict[str, Any] = field(default_factory=dict)  # the parsed YAML (logged to MLflow)

    @property
    def algorithms(self) -> list[str]:
        """The algorithms' labels: the names, or the variants' labels."""
        return [a.label for a in self.algorithm_settings]

    @property
    def tracking_enabled(self) -> bool:
        return self.tracking_uri != NO_TRACKING

    def config_text(self) -> str:
        """The study file as the user wrote it (else its config as YAML): what MLflow keeps."""
        import yaml

        if self.source is not None and self.source.is_file():
            return self.source.read_text()
        return yaml.safe_dump(self.raw, sort_keys=False)

    def settings(self, label: str) -> AlgorithmSettings:
        for entry in self.algorithm_settings:
            if entry.label == label:
                return entry
        raise KeyError(label)

    def resources(self, algorithm: str) -> Resources:
        return self.settings(algorithm).resources

    @property
    def runs(self) -> list[RunSpec]:
        """Every run of the study, problem-major, then algorithm, then seed."""
        return [
            RunSpec.make(
                options=entry.options,
                algorithm=entry.name,
                problem=problem,
                seed=seed,
                evaluations=self.evaluations,
                init_size=self.init_size,
                fidelity=self.fidelity,
                device="cuda" if entry.resources.num_gpus > 0 else "cpu",
                study=self.name,
                variant=entry.variant,
            )
            for problem in self.problems
            for entry in self.algorithm_settings
            for seed in self.seeds
        ]

