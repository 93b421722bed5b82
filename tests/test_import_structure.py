"""The package's layers, read from its imports: no cycle, and no layer reaching up.

A component is a top-level module or a sub-package of `wdrbo_dist`. Every import counts, a
function's deferred import and a type-only one (`if TYPE_CHECKING:`) included: a reader is tied
to the other file by it all the same. The layers, lowest first, are the architecture's data
flow: a run is pure and knows nothing of where it is stored, tracked or scheduled; backends map
a run function and know nothing of MLflow; analysis reads the store and writes files (and
publishes its report through the tracking connection); only the command line sees everything.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import wdrbo_dist

PACKAGE = Path(wdrbo_dist.__file__).parent

LAYERS: list[set[str]] = [
    {"__init__", "threads", "allocator", "records", "data", "backend_names", "atomic", "folder_lock", "settings"},
    {"models", "problems"},
    {"acquisition"},
    {"algorithms"},
    {"run", "mlflow_views", "compacted"},
    {"run_files"},  # a run as the store writes it
    {"study_spec", "store"},
    {"tracking", "backends", "submit", "output_folder", "store_writer"},
    {"config", "plan"},  # plan: what a study runs now, and what the store holds of it
    {"study", "analysis"},
    {"cli", "compile_kernels"},  # the two commands
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


def test_the_run_knows_nothing_of_storage_tracking_or_scheduling() -> None:
    graph = import_graph()
    assert not graph["run"] & {"store", "tracking", "backends", "study", "config"}
    assert not graph["analysis"] & {"backends", "study"}  # analysis reads the store


def test_backends_know_nothing_of_tracking_or_mlflow() -> None:
    """A backend maps the run function and the driver's opaque hook; what the hook does is not its business."""
    found = sorted(f"{path.relative_to(PACKAGE)} imports {name}"
                   for path in (PACKAGE / "backends").rglob("*.py")
                   for name in imported_names(path)
                   if name.split(".")[0] == "mlflow" or name == "wdrbo_dist.tracking"
                   or name.startswith(("wdrbo_dist.tracking.", "wdrbo_dist.tracking_")))
    assert found == []
    assert "backends" not in import_graph()["config"]  # config reads the names from backend_names


def test_analysis_uses_only_the_tracking_connection() -> None:
    """Publishing the report to MLflow needs the client and the lookups, not the study's tracker."""
    found = sorted(f"{path.relative_to(PACKAGE)} imports {name}"
                   for path in (PACKAGE / "analysis").rglob("*.py")
                   for name in imported_names(path)
                   if name.startswith("wdrbo_dist.tracking") and not name.startswith("wdrbo_dist.tracking.connection"))
    assert found == []


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

    assert features("import wdrbo_dist.run, wdrbo_dist.cli; ") == features("")
