"""An Adam step's acquisition in compiled calls (NumericalSettings.adam_pass `compiled`): ERBO's, WDRBO's
and SBO-KDE's mean UCB (`CompiledUCB`) and GP-UCB's posterior UCB on x alone
(`CompiledPosteriorUCB`); the UCB at every (candidate, context) pair is compiled_pairs.py's.

Why: the arithmetic is small (a few M multiply-adds at n = 99) but torch takes it in dozens of
calls at several us each; here one numba kernel (ucb_kernels.py) returns the values and their
closed-form x-gradients. The comment above `CompiledUCB` derives them.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from wdrbo_dist.models.context_features import ContextFeatures
from wdrbo_dist.models.gp import GaussianProcess
from wdrbo_dist.models.kernel import VARIANCE_FLOOR, numerical_basis, rbf
from wdrbo_dist.models.ucb_kernels import acquisition_terms, posterior_ucb


# An Adam step asks, for a few candidates x_b and differentiably in x, for the mean UCB over the
# centre's contexts c_j (weights w_j) and, in WDRBO, L(x_b) = max_m ||grad_c UCB(x_b, c_m)|| over
# M Lipschitz points. The arithmetic is small (a few M multiply-adds at n = 99) but torch takes
# it in dozens of calls at several us each, forward and backward. Here one numba kernel (its
# products in BLAS) returns the values and their closed-form x-gradients.
#
# All context-side vectors (kc_j of the centre, kc_m and dkc_m/dc_d of the points) go through
# one numerical basis V [n, r] built once per acquisition: with a = V^T kc and
# B_b = (kx_b * V)^T K^{-1} (kx_b * V) [r, r], a posterior variance is 1 - a^T B_b a and
# dk^T K^{-1} k = da^T B_b a. Where the basis would not save work (about as many vectors as
# data: few points, or two context dimensions) the kernel takes V = I.
#
# The mean term: E_b = c0 + (kx_b * alpha) . u + beta sum_j w_j sigma_bj with u = sum_j w_j kc_j
# (exact). Its x-gradient, with g_bie = -(x_be - z_ie) / l_e^2 and c_bj = w_j / sigma_bj where
# the variance is above the floor (0 below it, as torch's clamp):
#     dE_b/dx_be = sum_i kx_bi g_bie (alpha_i u_i - beta Z_bi),
#     Z_bi = sum_j c_bj kc_ji (K^{-1} (kx_b * kc_j))_i = sum_q S_b[q, i] (V G_b)[i, q],
# where S_b = (kx_b * V)^T K^{-1} and G_b = sum_j c_bj a_j a_j^T. L(x) and its x-gradient at each
# candidate's first maximiser (torch's argmax) follow `gp.context_gradient_jacobian` (its
# docstring derives them). numba is imported with this module, when an acquisition first takes this route.
class CompiledUCB:
    """x [b, d_x] -> E(x) - radius * L(x) [b], differentiable in x (L's gradient left out when
    `detach_lipschitz`): the kernel's arguments but the candidates, as C-contiguous float64
    arrays, built once per acquisition (`build`)."""

    def __init__(self, arguments: tuple, radius: float, detach_lipschitz: bool, identity: bool) -> None:
        self.arguments = arguments
        self.radius = radius
        self.detach_lipschitz = detach_lipschitz
        self.identity = identity  # V = I, not the vectors' numerical basis (also among the arguments)

    @classmethod
    def build(cls, model: GaussianProcess, nodes: Tensor, weights: Tensor, points: Tensor | None, beta: float,
              radius: float = 0.0, detach_lipschitz: bool = False,
              features: ContextFeatures | None = None) -> "CompiledUCB | None":
        """None off the CPU or float64. `points` None: no L term (ERBO). The basis is taken where
        it needs fewer multiply-adds per candidate (S_b, B_b, their products with the vectors'
        coefficients) than V = I. `features`: the GP's context features of the same nodes and
        points, whose vectors and numerical basis are the ones this would compute (the same
        arithmetic on the same inputs), so they are not computed twice."""
        tensors = [model.train_x, nodes, weights] + ([] if points is None else [points])
        if any(t.device.type != "cpu" or t.dtype != torch.float64 for t in tensors):
            return None
        dim_c = nodes.shape[-1]
        n, n_nodes = model.n, nodes.shape[0]
        if points is None:
            points = nodes.new_empty(0, dim_c)
        if features is not None:
            rows = features.mean.T  # [N + M + M d_c, n]: rbf's and context_gradient_vectors' bits, as below
        else:
            centre = rbf(nodes, model.train_x[:, -dim_c:], model.lengthscale[-dim_c:])  # [N, n]
            rows = torch.cat([centre, model.context_gradient_vectors(points).reshape(-1, n)])
        centre, gradient_vectors = rows[:n_nodes], rows[n_nodes:].view(1 + dim_c, points.shape[0], n)  # [1 + d_c, M, n]
        basis = features.span if features is not None and features.span is not None else None
        if basis is None:
            basis, _ = numerical_basis(rows)
        identity = identity_is_cheaper(n, basis.shape[1], centre.shape[0] + points.shape[0])
        if identity:
            basis = basis.new_empty(n, 0)
            centre_coefficients, coefficients = centre, gradient_vectors
        else:
            centre_coefficients, coefficients = centre @ basis, gradient_vectors @ basis
        arrays = (
            model.train_x, model.lengthscale, model.inverse, model.weights, float(model.mean_constant), float(beta),
            basis, identity, centre_coefficients, weights, weights @ centre,  # u = sum_j w_j kc_j, exact
            points, coefficients,  # [1 + d_c, M, r]: a_m, then da_md
            gradient_vectors[1:].reshape(-1, n).T,  # [n, d_c M]: dkc_m / dc_d in column d M + m (exact)
        )
        return cls(host_arrays(arrays), float(radius), detach_lipschitz, identity)

    def __call__(self, x: Tensor) -> Tensor:
        return _CompiledValue.apply(x, self)

    def value_and_gradient(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(value [b], its x-gradient [b, d_x]; L's part left out when `detach_lipschitz`)."""
        mean, d_mean, norm, d_norm = acquisition_terms(np.ascontiguousarray(x.detach().numpy()), *self.arguments)
        if self.radius:
            value = mean - self.radius * norm
            if not self.detach_lipschitz:
                d_mean = d_mean - self.radius * d_norm
        else:
            value = mean
        return torch.from_numpy(value), torch.from_numpy(d_mean)


class CompiledPosteriorUCB:
    """x [b, d] -> mu(x) + beta sigma(x) [b] on a GP over x alone (GP-UCB), differentiable in x:
    one kernel gives the values and their closed-form gradients (d mu = sum_i dk_i alpha_i,
    d sigma = -sum_i dk_i (K^{-1} k)_i / sigma) where torch's autograd runs ~25 small operations
    each way. The variance is 1 - ||L^{-1} k||^2 with L^{-1}, the Cholesky factor's inverse,
    formed once per acquisition: as accurate as torch's triangular solve, in two small products."""

    def __init__(self, arguments: tuple) -> None:
        self.arguments = arguments  # train, lengthscale, L^{-1}, alpha, constant mean, beta

    @classmethod
    def build(cls, model: GaussianProcess, beta: float) -> "CompiledPosteriorUCB | None":
        """None off the CPU or float64."""
        if model.train_x.device.type != "cpu" or model.train_x.dtype != torch.float64:
            return None
        factor = model.cholesky_factor
        inverse_factor = torch.linalg.solve_triangular(factor, torch.eye(model.n, dtype=factor.dtype), upper=False)
        return cls(host_arrays((model.train_x, model.lengthscale, inverse_factor, model.weights,
                                 float(model.mean_constant), float(beta))))

    def __call__(self, x: Tensor) -> Tensor:
        return _CompiledValue.apply(x, self)

    def value_and_gradient(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(value [b], its x-gradient [b, d])."""
        values, gradient = posterior_ucb(np.ascontiguousarray(x.detach().numpy()), *self.arguments, VARIANCE_FLOOR)
        return torch.from_numpy(values), torch.from_numpy(gradient)


def identity_is_cheaper(n: int, rank: int, used: int) -> bool:
    """Whether V = I needs no more multiply-adds per candidate than a basis of `rank` columns
    ([n, n] forms against S_b, B_b and their products with `used` coefficient rows)."""
    return rank == 0 or n * n * rank + (2 * n + used) * rank * rank >= (used + 1) * n * n


def host_arrays(values: tuple) -> tuple:
    """The kernel's arguments: tensors (CPU float64 here) as C-contiguous NumPy arrays."""
    arrays = []
    for value in values:  # (a loop, not a generator: the host move is this function's)
        arrays.append(value if isinstance(value, (bool, float)) else np.ascontiguousarray(value.numpy()))
    return tuple(arrays)


class _CompiledValue(torch.autograd.Function):
    """The forward pass computes the value and its x-gradient; the backward pass scales it."""

    @staticmethod
    def forward(ctx, x: Tensor, acquisition: CompiledUCB) -> Tensor:  # type: ignore[override]
        value, jacobian = acquisition.value_and_gradient(x)
        ctx.save_for_backward(jacobian)
        return value

    @staticmethod
    def backward(ctx, grad_value: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        (jacobian,) = ctx.saved_tensors
        return grad_value.unsqueeze(-1) * jacobian, None
