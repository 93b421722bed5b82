"""`make install` compiles every numba kernel of the package (wdrbo_dist/cli/compile_kernels.py), so
that no run or test pays numba's one-off compile: a kernel that its short runs do not reach is
a kernel whose first real call compiles."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil
from pathlib import Path

import wdrbo_dist
from wdrbo_dist.cli.compile_kernels import KERNEL_RUNS, compile_kernels


def _numba_modules() -> list[str]:
    found = []
    for module in pkgutil.walk_packages(wdrbo_dist.__path__, "wdrbo_dist."):
        origin = importlib.util.find_spec(module.name).origin
        if origin and "from numba import" in Path(origin).read_text():
            found.append(module.name)
    return found


def _kernels(module) -> dict:
    """The numba kernels the module defines (not those it imports)."""
    return {name: value for name, value in vars(module).items()
            if type(value).__name__ == "CPUDispatcher" and value.py_func.__module__ == module.__name__}


def _entry_kernels(module, kernel_sources: set[str]) -> dict:
    """The kernels Python calls: those the module's Python code calls, and those no other kernel
    of the package calls (a process that loads a kernel from numba's cache loads the kernels it
    calls inside it, those of other modules too, but a kernel called from Python as well is
    compiled on its own). `kernel_sources`: the source of every kernel of the package."""
    kernels = _kernels(module)
    sources = {name: inspect.getsource(kernel.py_func) for name, kernel in kernels.items()}
    python_code = inspect.getsource(module)
    for source in sources.values():
        python_code = python_code.replace(source, "")
    return {name: kernel for name, kernel in kernels.items()
            if f"{name}(" in python_code
            or not any(f"{name}(" in source for source in kernel_sources if source != sources[name])}


def test_the_install_step_compiles_every_numba_kernel_in_the_package(capsys):
    modules = _numba_modules()
    assert {"wdrbo_dist.acquisition.mmd.ipm", "wdrbo_dist.models.ucb_kernels"} <= set(modules)
    compile_kernels()
    loaded = [importlib.import_module(name) for name in modules]
    kernel_sources = {inspect.getsource(kernel.py_func) for module in loaded for kernel in _kernels(module).values()}
    entries = {f"{module.__name__}.{kernel}": dispatcher for module in loaded
               for kernel, dispatcher in _entry_kernels(module, kernel_sources).items()}
    assert entries and [name for name, dispatcher in entries.items() if not dispatcher.signatures] == []
    assert capsys.readouterr().out.count("compiled the kernels") == len(KERNEL_RUNS)
