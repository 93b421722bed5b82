"""The package's layers, read from its imports: no cycle, and no layer reaching up.

A component is a folder of `wdrbo_dist` (a layer) or one of its few top-level modules. Every import counts, a
function's deferred import and a type-only one (`if TYPE_CHECKING:`) included: a reader is tied
to the other file by it all the same. The layers, lowest first, are the architecture's data
flow: a run is pure and knows nothing of where it is stored, tracked or scheduled; backends map
a run function and know nothing of MLflow or files; analysis reads the store and writes files,
and tracking publishes what it computed; only the command line sees everything.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import wdrbo_dist

PACKAGE = Path(wdrbo_dist.__file__).parent

LAYERS: list[set[str]] = [  # the package's folders, lowest first; a folder imports only from folders below it
    {"__init__", "errors", "data"},  # the package face, the exit codes and one-line errors, packaged data
    {"problems", "models"},
    {"acquisition"},
    {"run"},
    {"execution"},  # how runs are scheduled: knows the run, nothing of files or MLflow
    {"study"},  # what a study is: YAML -> StudySpec -> RunSpecs
    {"storage"},
    {"tracking"},
    {"driver", "analysis"},
    {"cli"},
    {"__main__"},
]


def component(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imported_names(path: Path) -> Iterator[str]:
    """Every name a file imports (`a.b` and `a.b.c` for `from a.b import c`), wherever the import
    is: at the top, in a function, under `if TYPE_CHECKING:`."""
    package = ["wdrbo_dist", *path.relative_to(PACKAGE).with_suffix("").parts][:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:  # relative: from the file's package, one level up per extra dot
                module = ".".join(package[: len(package) - node.level + 1] + ([module] if module else []))
            yield module
            yield from (f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        source = "__init__" if parts == ("__init__",) else parts[0]
        targets = graph.setdefault(source, set())
        for name in imported_names(path):
            if name == "wdrbo_dist" or name.startswith("wdrbo_dist."):
                target = component(name)
                if target != source and ((PACKAGE / target).is_dir() or (PACKAGE / f"{target}.py").is_file()):
                    targets.add(target)
    return graph


def layer_of(name: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if name in layer)


def test_every_component_has_a_layer() -> None:
    components = {p.stem for p in PACKAGE.glob("*.py")} | {p.name for p in PACKAGE.iterdir() if p.is_dir()}
    components = {c for c in components if not c.startswith("__pycache__")}
    assert components == set().union(*LAYERS)


def test_no_component_imports_one_of_its_own_layer_or_above() -> None:
    upward = sorted(
        f"{source} (layer {layer_of(source)}) imports {target} (layer {layer_of(target)})"
        for source, targets in import_graph().items()
        for target in targets
        if layer_of(target) >= layer_of(source)
    )
    assert upward == []


def test_the_package_top_holds_only_what_belongs_to_no_layer() -> None:
    """At most five modules sit directly in the package; everything else lives in its layer's folder."""
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert loose == ["__init__.py", "__main__.py", "errors.py"]


def test_every_folder_says_what_its_layer_is() -> None:
    """Each folder's `__init__` opens with a docstring naming the layer and what it may import."""
    import importlib

    for folder in sorted(p for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()):
        doc = importlib.import_module(f"wdrbo_dist.{folder.name}").__doc__
        assert doc and len(doc.strip()) > 40, folder.name


def test_the_run_knows_nothing_of_storage_tracking_or_scheduling() -> None:
    graph = import_graph()
    assert not graph["run"] & {"storage", "tracking", "execution", "study", "driver"}
    assert not graph["execution"] & {"storage", "tracking", "study", "driver"}


def mlflow_or_tracking_imports(folder: str) -> list[str]:
    return sorted(f"{path.relative_to(PACKAGE)} imports {name}"
                  for path in (PACKAGE / folder).rglob("*.py")
                  for name in imported_names(path)
                  if name.split(".")[0] == "mlflow" or name == "wdrbo_dist.tracking"
                  or name.startswith("wdrbo_dist.tracking."))


def test_backends_know_nothing_of_tracking_or_mlflow() -> None:
    """A backend maps the run function and the driver's opaque hook; what the hook does is not its business."""
    assert mlflow_or_tracking_imports("execution") == []


def test_analysis_computes_and_tracking_publishes() -> None:
    """Analysis reads the store and writes files; publishing what it computed to MLflow is tracking's."""
    assert mlflow_or_tracking_imports("analysis") == []
    assert not import_graph()["tracking"] & {"analysis", "execution"}


def test_importing_the_package_leaves_numpys_cpu_features_alone() -> None:
    """A notebook that imports the package first keeps NumPy's own kernels: no feature is off."""
    import subprocess
    import sys

    def features(first: str) -> str:
        code = (f"{first}import numpy; f = numpy._core._multiarray_umath.__cpu_features__; "
                "print(sorted(k for k, v in f.items() if v))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout

    assert features("import wdrbo_dist.run.loop, wdrbo_dist.cli; ") == features("")
