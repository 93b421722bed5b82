"""A study read back from its output folder alone, when its config is not at hand.

Every run the store holds (finished or failed) is an expected run, keyed by the key it was
stored under: a run key hashes the package version, so a folder written by another version
still reads back whole. Nothing can be missing here: a folder does not know what was never run.
What the stored files say is checked like a config before it names a file: a study name that is
no name (an absolute path, `..`) gives way to the folder's name, a fidelity that is no fidelity
stops the command.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from wdrbo_dist.errors import one_line
from wdrbo_dist.problems.base import FIDELITIES
from wdrbo_dist.run.spec import RunSpec
from wdrbo_dist.storage.run_files import spec_from_dict
from wdrbo_dist.storage.store import ResultStore
from wdrbo_dist.study.spec import is_name


@dataclass(frozen=True)
class StoredRunSpec(RunSpec):
    """A spec as its store's meta gives it, with the key its files are named by."""

    stored_key: str = ""

    @property
    def run_key(self) -> str:
        return self.stored_key


@dataclass
class FolderStudy:
    """What `load_study` needs of a study (name, output_dir, runs), read from a folder."""

    name: str
    output_dir: Path
    runs: list[RunSpec] = field(default_factory=list)
    fidelity: str = ""
    tracking_uri: str = "none"
    tracking_enabled: bool = False


def study_from_folder(folder: str | Path) -> FolderStudy:
    """The runs stored under `folder`, named by the study their specs name (else, or when that is
    no valid name, the folder's name); ValueError (one line) when it holds no run or a bad fidelity."""
    path = Path(folder)
    store = ResultStore(path)
    keys = sorted(store.finished_keys() | store.failed_keys())
    if not keys:
        raise ValueError(f"{path}: no finished or failed run here (runs/*.json, failed/*.json)")
    specs = []
    for key in keys:
        data = store.read_meta(key)["spec"]
        spec = spec_from_dict(data)
        if spec.fidelity not in FIDELITIES:
            raise ValueError(f"run {key}: spec.fidelity: must be one of {', '.join(FIDELITIES)}; "
                             f"got {one_line(repr(spec.fidelity)[:80], 80)}")
        specs.append(StoredRunSpec(**{f: getattr(spec, f) for f in spec.__dataclass_fields__}, stored_key=key))
    names = Counter(s.study for s in specs if is_name(s.study))
    fidelities = Counter(s.fidelity for s in specs)
    return FolderStudy(name=names.most_common(1)[0][0] if names else path.resolve().name, output_dir=path,
                       runs=specs, fidelity=fidelities.most_common(1)[0][0])
