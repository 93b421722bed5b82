"""Where a run moves tensors to the host, on purpose: the places a GPU run pays a transfer.

A run on `--device cuda` keeps the GP, the acquisitions and the optimiser on the device; a few
places move data to the host by design. This test watches every explicit host move (`.cpu()`,
`.numpy()`, `.tolist()`) of a short run of every algorithm, on any machine, and fails when one
happens anywhere else: a new transfer is a decision, added here with its reason. It does not
show that tensors are *created* on the device (that needs a GPU: issue 16).
"""

from __future__ import annotations

import traceback
from collections import Counter

import pytest
import torch
from torch.overrides import TorchFunctionMode

from wdrbo_dist.acquisition.registry import ALGORITHMS
from wdrbo_dist.run.spec import RunSpec
from wdrbo_dist.run.loop import run_one

HOST_MOVES = {torch.Tensor.cpu, torch.Tensor.numpy, torch.Tensor.tolist}
ON_PURPOSE = {
    ("run/loop.py", "evaluate"): "the observation and its expected value go to the records",
    ("acquisition/optimize.py", "boltzmann_starts"):
        "start points are drawn with the algorithm stream's CPU generator: the same starts on every device",
    ("acquisition/optimize.py", "_window_weights"):
        "the stopping rule's weights are built on the CPU (BoTorch's) and kept as Python floats: no device tensor",
    ("acquisition/optimize.py", "_window_lanes"):
        "the one-time check of the stopping rule's summation order runs on CPU test windows",
    ("models/fit.py", "fit_gp"): "the GP's hyperparameters are fitted by SciPy's L-BFGS-B on the host",
    ("models/gp.py", "_cpu_views"):
        "WDRBO's closed-form L(x) gradient runs in NumPy on views of CPU tensors only (on a GPU, in torch)",
    ("acquisition/drbo_mmd.py", "factor"): "DRBO-MMD's conic program is solved on the CPU",
    ("acquisition/drbo_mmd.py", "acquisition"): "DRBO-MMD's conic program is solved on the CPU",
    ("acquisition/drbo_mmd.py", "forward"): "DRBO-MMD's conic program is solved on the CPU",
    ("acquisition/drbo_mmd.py", "worst_case_mean"): "DRBO-MMD's conic program is solved on the CPU",
    ("acquisition/drbo_mmd.py", "worst_case"): "DRBO-MMD's conic program is solved on the CPU",
    ("acquisition/mmd_minimax.py", "closed_form"):
        "the minimax's compiled Adam closed form takes the compiled pair kernel's CPU tensors only",
    ("acquisition/mmd/minimax_kernel.py", "minimax_step"):
        "the minimax's compiled Adam closed form takes the compiled pair kernel's CPU tensors only",
    ("acquisition/drbo_kde.py", "_solved"): "DRBO-KDE's LP route (drbokde_closed_form: false) is solved on the CPU",
    ("models/compiled_ucb.py", "host_arrays"): "the compiled Adam step (NumericalSettings.adam_pass) is built for CPU tensors only",
    ("models/compiled_ucb.py", "value_and_gradient"): "the compiled Adam step (NumericalSettings.adam_pass) runs on CPU tensors only",
    ("models/compiled_pairs.py", "values"): "the compiled pair kernel's forward pass runs on CPU tensors only",
    ("models/compiled_pairs.py", "gradient"): "the compiled pair kernel's backward pass runs on CPU tensors only",
    ("models/compiled_pairs.py", "minimum_values"): "the compiled minimum over fresh contexts runs on CPU tensors only",
    ("models/compiled_pairs.py", "minimum_gradient"): "the compiled minimum's backward pass runs on CPU tensors only",
    ("models/compiled_pairs.py", "__call__"): "the compiled minimum over fresh contexts runs on CPU tensors only",
    ("models/pair_routes.py", "_ucb_without_gradient"):
        "the screening pass's compiled elementwise passes take CPU float64 tensors only (elsewhere, torch's)",
    ("acquisition/mmd/grid.py", "context_gram"):
        "the grid Gram matrix's compiled symmetric part takes CPU float64 tensors only (elsewhere, torch's)",
    ("acquisition/sobol.py", "_direction_numbers"):
        "Sobol points are drawn on the host, as torch's SobolEngine draws them, then moved",
}
FAST = {"num_restarts": 2, "raw_samples": 32, "batch_limit": 32}


class HostMoves(TorchFunctionMode):
    """Counts explicit host moves by the package function that made them."""

    def __init__(self) -> None:
        super().__init__()
        self.sites: Counter[tuple[str, str]] = Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in HOST_MOVES:
            for frame in reversed(traceback.extract_stack()[:-1]):
                if "/wdrbo_dist/" in frame.filename:
                    self.sites[(frame.filename.split("/wdrbo_dist/", 1)[1], frame.name)] += 1
                    break
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize(("algorithm", "options"), [
    *((name, {}) for name in ALGORITHMS),
    ("drbo-kde", {"drbokde_closed_form": False}),  # the LP route
])
def test_a_run_moves_tensors_to_the_host_only_where_it_means_to(algorithm: str, options: dict) -> None:
    spec = RunSpec.make(options=FAST | options, algorithm=algorithm, problem="newsvendor", seed=1,
                        evaluations=6, init_size=4)
    with HostMoves() as moves:
        assert run_one(spec, capture_errors=False).ok
    unexpected = sorted(set(moves.sites) - set(ON_PURPOSE))
    assert unexpected == [], f"host moves outside the known places: {unexpected}"
    assert moves.sites[("run/loop.py", "evaluate")] > 0  # the watch sees the package's moves at all
