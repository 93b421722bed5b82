"""Study files: YAML -> a validated `StudySpec` (`study_spec`) -> the list of `RunSpec`.

Everything a study needs is checked here, before any work starts, so that a typo costs one
line of output instead of an hour of runs. Each error is a `ConfigError` whose message is one
line naming the field (`algorithms[1].options.beta`) and the values it allows.
configs/example.yaml is a study file with every key, annotated.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any


from wdrbo_dist.acquisition.options import describe, shown
from wdrbo_dist.errors import one_line, redact
from wdrbo_dist.execution.names import BACKENDS
from wdrbo_dist.problems.base import FIDELITIES
from wdrbo_dist.run.spec import OptionValue
from wdrbo_dist.study.yaml_file import ConfigError, read_yaml
from wdrbo_dist.study.spec import (
    DEFAULT_TRACKING_URI, NAME_MAX_CHARS, NAME_RULE, NO_TRACKING, AlgorithmSettings, Resources, StudySpec, is_name,
)

TOP_LEVEL_KEYS = (
    "name", "description", "fidelity", "problems", "algorithms", "seeds", "evaluations",
    "init_size", "backend", "workers", "tracking_uri", "output_dir", "run_timeout_s",
)
REQUIRED_KEYS = ("name", "problems", "algorithms", "seeds")
ALGORITHM_KEYS = ("name", "label", "options", "resources")
RESOURCE_KEYS = ("num_cpus", "num_gpus")
SEED_KEYS = ("start", "count")
SEED_MAX = 2**63 - 1  # the analysis holds seeds as int64
SEEDS_MAX = 100_000  # seeds in one study: more is a typo (and a run list too big to build)
NAME_MAX_BYTES = 255  # NAME_MAX: the longest file name (one path component) of Linux file systems
PATH_MAX_BYTES = 4000  # PATH_MAX is 4096, with room for the files under a folder


def load_study_config(path: str | os.PathLike[str], validate_runs: bool = True) -> StudySpec:
    """Read and validate a study file; relative paths resolve against the working folder."""
    return parse_study_config(read_yaml(path), source=Path(path), validate_runs=validate_runs)


def parse_study_config(
    data: Any, source: Path | None = None, validate_runs: bool = True
) -> StudySpec:
    """Validate an already-parsed study mapping (see the module docstring for its keys)."""
    from wdrbo_dist.acquisition.registry import ALGORITHMS
    from wdrbo_dist.problems import PROBLEMS

    if not isinstance(data, Mapping):
        raise ConfigError(
            f"config: must be a mapping with keys {', '.join(TOP_LEVEL_KEYS)}; got {describe(data)}"
        )
    _check_keys("config", data, TOP_LEVEL_KEYS)
    for key in REQUIRED_KEYS:
        if key not in data:
            raise ConfigError(f"{key}: required field missing")

    name = _string("name", data["name"])
    if not is_name(name):
        raise ConfigError(f"name: must match {NAME_RULE}, got {shown(name)}")
    description = _string("description", data.get("description", ""), allow_empty=True)
    fidelity = _choice("fidelity", data.get("fidelity", "paper"), FIDELITIES)
    problems = _name_list("problems", data["problems"], tuple(PROBLEMS))
    algorithms = _algorithms(data["algorithms"], ALGORITHMS)
    seeds = _seeds(data["seeds"])
    evaluations = _integer("evaluations", data.get("evaluations", 100), minimum=2)
    init_size = _integer("init_size", data.get("init_size", 5), minimum=1)
    if init_size >= evaluations:
        raise ConfigError(
            f"init_size: must be smaller than evaluations ({evaluations}), got {init_size}"
        )
    backend = _choice("backend", data.get("backend", "local"), BACKENDS)
    workers = _integer("workers", data.get("workers", 2), minimum=1)
    tracking_uri = _tracking_uri(data.get("tracking_uri", DEFAULT_TRACKING_URI))
    output_dir = _path("output_dir", data.get("output_dir", f"results/{name}"))
    run_timeout_s = _run_timeout(data.get("run_timeout_s"))

    study = StudySpec(
        name=name,
        fidelity=fidelity,
        problems=problems,
        algorithm_settings=algorithms,
        seeds=seeds,
        evaluations=evaluations,
        init_size=init_size,
        backend=backend,
        workers=workers,
        tracking_uri=tracking_uri,
        output_dir=output_dir,
        run_timeout_s=run_timeout_s,
        description=description,
        source=source.resolve() if source else None,
        raw=dict(data),
    )
    if validate_runs:
        _validate_runs(study)
    return study


def _validate_runs(study: StudySpec) -> None:
    """Let the run loop judge every combination (option values, problem x algorithm fit).

    The check runs on the CPU device: a GPU requested in `resources` lives on a cluster node,
    not necessarily on the machine that validates, and the device is not part of the records.
    """
    from wdrbo_dist.run.spec import validate_spec

    checked: set[tuple[str, str]] = set()
    for spec in study.runs:
        pair = (spec.problem, spec.algorithm_label)
        if pair in checked:
            continue
        checked.add(pair)
        try:
            validate_spec(dataclasses.replace(spec, device="cpu"))
        except ValueError as exc:
            index = study.algorithms.index(spec.algorithm_label)
            message = one_line(exc, 150)
            raise ConfigError(
                f"algorithms[{index}] ({spec.algorithm_label}) on problem {spec.problem}: {message}"
            ) from None


# --- field validators ---------------------------------------------------------------------------


def _check_keys(where: str, data: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
    for key in data:
        if key not in allowed:
            raise ConfigError(f"{where}: unknown key {shown(key)}; allowed keys: {', '.join(allowed)}")


def _string(name: str, value: Any, allow_empty: bool = False) -> str:
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        raise ConfigError(f"{name}: must be a {'' if allow_empty else 'non-empty '}string, got {describe(value)}")
    return value.strip()


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ConfigError(f"{name}: must be one of {', '.join(allowed)}; got {shown(value)}")
    return value


def _integer(name: str, value: Any, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum or (maximum is not None and value > maximum):
        allowed = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise ConfigError(f"{name}: must be an integer {allowed}, got {describe(value)}")
    return value


def _number(name: str, value: Any, minimum: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name}: must be a number >= {minimum:g}, got {describe(value)}")
    if not math.isfinite(value) or value < minimum:
        raise ConfigError(f"{name}: must be a number >= {minimum:g}, got {shown(value)}")
    return float(value)


def _name_list(name: str, value: Any, allowed: tuple[str, ...]) -> list[str]:
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{name}: must be a non-empty list of {', '.join(allowed)}")
    seen: list[str] = []
    for i, item in enumerate(value):
        if item not in allowed:
            raise ConfigError(f"{name}[{i}]: unknown {shown(item)}; allowed: {', '.join(allowed)}")
        if item in seen:
            raise ConfigError(f"{name}[{i}]: {shown(item)} is listed twice; each may appear once")
        seen.append(item)
    return seen


def _seeds(value: Any) -> list[int]:
    if isinstance(value, Mapping):
        _check_keys("seeds", value, SEED_KEYS)
        if set(value) != set(SEED_KEYS):
            raise ConfigError("seeds: a mapping needs both start and count, e.g. {start: 100, count: 15}")
        start = _integer("seeds.start", value["start"], minimum=0, maximum=SEED_MAX)
        count = _integer("seeds.count", value["count"], minimum=1, maximum=min(SEEDS_MAX, SEED_MAX - start + 1))
        return list(range(start, start + count))
    if not isinstance(value, list) or not value or len(value) > SEEDS_MAX:
        raise ConfigError(f"seeds: must be a list of 1 to {SEEDS_MAX} integers in [0, 2**63 - 1] or {{start: S, count: N}}")
    seeds = [_integer(f"seeds[{i}]", s, minimum=0, maximum=SEED_MAX) for i, s in enumerate(value)]
    for i, s in enumerate(seeds):
        if s in seeds[:i]:
            raise ConfigError(f"seeds[{i}]: seed {s} is listed twice; each may appear once")
    return seeds


def _algorithms(value: Any, registry: Mapping[str, Any]) -> list[AlgorithmSettings]:
    allowed = tuple(registry)
    if not isinstance(value, list) or not value:
        raise ConfigError(
            "algorithms: must be a non-empty list of names or {name, options, resources}; "
            f"names: {', '.join(allowed)}"
        )
    result: list[AlgorithmSettings] = []
    for i, item in enumerate(value):
        where = f"algorithms[{i}]"
        if isinstance(item, str):
            item = {"name": item}
        if not isinstance(item, Mapping):
            raise ConfigError(f"{where}: must be a name or a mapping with keys {', '.join(ALGORITHM_KEYS)}")
        _check_keys(where, item, ALGORITHM_KEYS)
        if "name" not in item:
            raise ConfigError(f"{where}.name: required field missing; allowed: {', '.join(allowed)}")
        algo = item["name"]
        if not isinstance(algo, str) or algo not in registry:
            raise ConfigError(f"{where}.name: unknown algorithm {shown(algo)}; allowed: {', '.join(allowed)}")
        label = item.get("label")
        if label is not None and (not isinstance(label, str) or not _LABEL.fullmatch(label)
                                  or len(label) > NAME_MAX_CHARS):
            raise ConfigError(f"{where}.label: must be a name of letters, digits and -_.=[], at most "
                              f"{NAME_MAX_CHARS} characters, got {describe(label)}")
        resources = _resources(f"{where}.resources", item.get("resources") or {})
        for variant, options in _variants(f"{where}.options", item.get("options") or {}, registry[algo], label):
            entry = AlgorithmSettings(name=algo, options=options, resources=resources, variant=variant)
            for other in result:
                if other.label == entry.label:
                    raise ConfigError(
                        f"{where}: {shown(entry.label)} is listed twice; give each variant of {algo} its own label"
                    )
                if other.name == algo and other.options == options:
                    raise ConfigError(f"{where}: {shown(entry.label)} has the options of {shown(other.label)} "
                                      "(the same runs)")
            result.append(entry)
    return result


_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.=\-\[\]]*")


def _variants(where: str, value: Any, entry: Any, label: str | None) -> list[tuple[str, dict[str, OptionValue]]]:
    """(variant label, options) per combination of the options given as lists.

    Without lists: one entry, labelled `label` ("" when none is given: the algorithm's name).
    With lists: one variant per combination, labelled `label or name` and the listed values,
    e.g. `wdrbo[radius_constant=0.1]`.
    """
    if not isinstance(value, Mapping):
        return [(label or "", _options(where, value, entry))]
    listed = {key: given for key, given in value.items() if isinstance(given, list)}
    for key, given in listed.items():
        if not given:
            raise ConfigError(f"{where}.{key}: an empty list gives no variant; give one value or several")
    fixed = {key: given for key, given in value.items() if key not in listed}
    if not listed:
        return [(label or "", _options(where, fixed, entry))]
    variants = []
    for combination in itertools.product(*listed.values()):
        chosen = dict(zip(listed, combination))
        options = _options(where, {**fixed, **chosen}, entry)
        suffix = ",".join(f"{key}={options[key]}" for key in listed)
        variant = f"{label or entry.name}[{suffix}]"
        if len(variant) > NAME_MAX_CHARS or "/" in variant or "\0" in variant:
            raise ConfigError(f"{where}: the variant label {shown(variant)} must be at most {NAME_MAX_CHARS} "
                              "characters without / or NUL (it names files): give the entry a shorter label")
        variants.append((variant, options))
    return variants


def _options(where: str, value: Any, entry: Any) -> dict[str, OptionValue]:
    """An algorithm's options, each checked by its declaration (see acquisition/options.py)."""
    declared = entry.declared_options()
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: must be a mapping of option: value; options: {', '.join(declared) or 'none'}")
    options: dict[str, OptionValue] = {}
    for key, given in value.items():
        if key not in declared:
            raise ConfigError(
                f"{where}: unknown option {shown(key)}; allowed: "
                f"{', '.join(declared) or 'none (this algorithm has no options)'}"
            )
        try:
            options[key] = declared[key].check(given)
        except ValueError as exc:
            raise ConfigError(f"{where}.{key}: {one_line(exc, 200)}") from None
    return options


def _resources(where: str, value: Any) -> Resources:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: must be a mapping with keys {', '.join(RESOURCE_KEYS)}")
    _check_keys(where, value, RESOURCE_KEYS)
    num_cpus = _number(f"{where}.num_cpus", value.get("num_cpus", 1), minimum=0)
    num_gpus = _number(f"{where}.num_gpus", value.get("num_gpus", 0), minimum=0)
    if num_cpus == 0 and num_gpus == 0:
        raise ConfigError(f"{where}: num_cpus and num_gpus cannot both be 0 (a run needs somewhere to run)")
    return Resources(num_cpus=num_cpus, num_gpus=num_gpus)


def _run_timeout(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"run_timeout_s: must be a number of seconds > 0 (or left out: no limit), got {describe(value)}")
    return float(value)


def _tracking_uri(value: Any) -> str:
    allowed = "sqlite:///PATH, postgresql://HOST:PORT/DB, http://HOST:PORT, https://HOST:PORT or none"
    if value is None or value is False:
        return NO_TRACKING
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"tracking_uri: must be one of {allowed}; got {describe(value)}")
    uri = value.strip()
    if uri.lower() == NO_TRACKING:
        return NO_TRACKING
    authority = re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://([^/?#]*)", uri)
    if authority and "@" in authority.group(1):
        # study.json, MLflow's params and Ray's job settings keep the URI: no secret in it.
        where = ("PGUSER / PGPASSWORD (or ~/.pgpass)" if uri.lower().startswith("postgresql")
                 else "MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD")
        raise ConfigError(f"tracking_uri: no user:password@ in the URI ({shown(redact(uri))}): set "
                          f"{where} in the environment instead")
    if uri.startswith("sqlite:///"):
        db_path = uri[len("sqlite:///"):]
        if not db_path or db_path.endswith("/"):
            raise ConfigError(f"tracking_uri: a sqlite URI must name a file, e.g. sqlite:///mlflow.db; "
                              f"got {shown(uri)}")
        # Resolved once, here, so that workers and later commands find the same store.
        return "sqlite:///" + str(_resolve("tracking_uri", db_path))
    if re.match(r"^https?://[^/\s:@]+(:\d+)?(/\S*)?$", uri):
        return uri.rstrip("/")
    postgres = re.match(r"^postgresql(?:\+psycopg)?://([^/?#\s]+/[^/?#\s]+(?:\?[^#\s]*)?)$", uri)
    if postgres:
        if re.search(r"(?i)password", uri.partition("?")[2]):
            raise ConfigError("tracking_uri: no password in the URI: set PGPASSWORD (or ~/.pgpass) in the "
                              "environment instead")
        # psycopg (3) is the driver the package installs; SQLAlchemy's plain postgresql:// means psycopg2.
        return "postgresql+psycopg://" + postgres.group(1)
    raise ConfigError(f"tracking_uri: must be one of {allowed}; got {shown(redact(uri))}")


def _path(name: str, value: Any) -> Path:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{name}: must be a folder path (a non-empty string), got {describe(value)}")
    return _resolve(name, value.strip())


def _resolve(name: str, text: str) -> Path:
    """`text` as an absolute path, ~ expanded (a NUL byte or an unknown ~user is the field's error);
    a component or a whole path longer than the file system takes is refused here, not mid-study."""
    _check_lengths(name, text)
    try:
        path = Path(text).expanduser().resolve()
    except (OSError, RuntimeError, ValueError) as exc:
        raise ConfigError(f"{name}: not a usable path {shown(text)} ({one_line(exc, 80)})") from None
    _check_lengths(name, str(path))
    return path


def _check_lengths(name: str, text: str) -> None:
    for part in text.split("/"):
        if len(part.encode("utf-8", "surrogatepass")) > NAME_MAX_BYTES:
            raise ConfigError(f"{name}: a path component is longer than {NAME_MAX_BYTES} bytes "
                              f"(the file system's limit), got {shown(part)}")
    if len(text.encode("utf-8", "surrogatepass")) > PATH_MAX_BYTES:
        raise ConfigError(f"{name}: a path longer than {PATH_MAX_BYTES} bytes, got {shown(text)}")
