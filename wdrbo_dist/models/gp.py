"""The GP surrogate of method §1.4, written for speed on small data.

BoTorch's default `SingleTaskGP` (the reference's): RBF-ARD kernel, unit prior variance,
LogNormal(sqrt(2) + ln(D)/2, sqrt(3)) lengthscale priors (>= 0.025), a LogNormal(-4, 1) noise
prior (>= 1e-4), a constant mean, MAP-fitted by L-BFGS-B on the exact marginal log-likelihood / n,
targets standardised with the unbiased std. Re-implemented in a few dense tensor operations
because a BO step fits it once and queries it tens of thousands of times (the general machinery:
~10x more per step at n <= 100); tests/models/test_gp.py checks it against BoTorch and gpytorch.
Everything is float64 on the training data's device; the posterior is in standardised-y units.
"""

from __future__ import annotations

from types import ModuleType
from typing import TypeVar

import numpy as np
import torch
from torch import Tensor

from wdrbo_dist.models.kernel import VARIANCE_FLOOR, rbf
from wdrbo_dist.models.pair_routes import PairRoutes
from wdrbo_dist.models.settings import CPU, NumericalSettings


class GaussianProcess(PairRoutes):
    """An exact GP posterior with fixed hyperparameters (fit it with `fit.fit_gp`). Its routes for
    context sets are those of `PairRoutes` and `ContextSide`, chosen by `settings`."""

    def __init__(
        self,
        train_x: Tensor,
        train_y_std: Tensor,
        lengthscale: Tensor,
        noise: float,
        mean_constant: float,
        y_mean: float = 0.0,
        y_std: float = 1.0,
        settings: NumericalSettings = CPU,
    ) -> None:
        self.train_x = train_x
        self.settings = settings  # the run's numerical routes; the acquisitions read them here
        self.context_basis = settings.context_basis  # the route of `context_features` (see `ucb_pairs`)
        self._basis_triangles: dict[int, tuple[Tensor, Tensor]] = {}
        self.train_y = train_y_std
        self.lengthscale = lengthscale.to(train_x)
        self.noise = float(noise)
        self.mean_constant = float(mean_constant)
        self.y_mean, self.y_std = y_mean, y_std
        n = train_x.shape[0]
        k = rbf(train_x, train_x, self.lengthscale)
        k.diagonal().add_(self.noise)
        self._chol = torch.linalg.cholesky(k)
        resid = (train_y_std - self.mean_constant).unsqueeze(-1)
        self._alpha = torch.cholesky_solve(resid, self._chol).squeeze(-1)  # [n]
        # K^{-1}, used for the variance gradient; n <= a few hundred, so explicit is fine.
        self._k_inv = torch.cholesky_inverse(self._chol)
        self.n = n

    @property
    def weights(self) -> Tensor:
        """alpha = K^{-1} (y - m): the posterior mean is m + k^T alpha."""
        return self._alpha

    @property
    def inverse(self) -> Tensor:
        """K^{-1} (with the noise on its diagonal)."""
        return self._k_inv

    @property
    def cholesky_factor(self) -> Tensor:
        """L, lower triangular, with L L^T = K (the noise on its diagonal)."""
        return self._chol

    @property
    def dim(self) -> int:
        return self.train_x.shape[-1]

    def cross_covariance(self, z: Tensor) -> Tensor:
        return rbf(z, self.train_x, self.lengthscale)

    def posterior(self, z: Tensor) -> tuple[Tensor, Tensor]:
        """Latent posterior mean and variance at z [..., D] -> ([...], [...]); differentiable."""
        shape = z.shape[:-1]
        flat = z.reshape(-1, z.shape[-1])
        k_zx = self.cross_covariance(flat)  # [m, n]
        mean = self.mean_constant + k_zx @ self._alpha
        v = torch.linalg.solve_triangular(self._chol, k_zx.T, upper=False)  # [n, m]
        var = (1.0 - (v * v).sum(0)).clamp_min(VARIANCE_FLOOR)
        return mean.reshape(shape), var.reshape(shape)

    def ucb(self, z: Tensor, beta: float) -> Tensor:
        """mu + beta * sigma at z [..., D] -> [...]."""
        mean, var = self.posterior(z)
        return mean + beta * var.sqrt()

    def ucb_and_gradient(self, z: Tensor, beta: float, dims: slice) -> tuple[Tensor, Tensor]:
        """UCB and its analytic gradient w.r.t. the coordinates `dims` of z.

        For the RBF kernel, d k(z, x_i)/dz = -k(z, x_i) (z - x_i)/l^2, so
        d mu = sum_i alpha_i d k_i and d var = -2 sum_i d k_i (K^{-1} k)_i. This is exact, and
        cheaper than a backward pass (used for WDRBO's Lipschitz constant, method §3.1).
        Returns (ucb [...], grad [..., len(dims)]). Differentiable w.r.t. z as well.
        """
        shape = z.shape[:-1]
        flat = z.reshape(-1, z.shape[-1])
        k_zx = self.cross_covariance(flat)  # [m, n]
        mean = self.mean_constant + k_zx @ self._alpha
        w = k_zx @ self._k_inv  # [m, n] = (K^{-1} k)^T
        var = (1.0 - (w * k_zx).sum(-1)).clamp_min(VARIANCE_FLOOR)
        sigma = var.sqrt()
        ls2 = self.lengthscale[dims] ** 2
        diff = (flat[:, None, dims] - self.train_x[None, :, dims]) / ls2  # [m, n, g]
        dk = -k_zx.unsqueeze(-1) * diff  # [m, n, g]
        d_mean = torch.einsum("mng,n->mg", dk, self._alpha)
        d_var = -2.0 * torch.einsum("mng,mn->mg", dk, w)
        d_ucb = d_mean + beta * d_var / (2.0 * sigma.unsqueeze(-1))
        ucb = mean + beta * sigma
        return ucb.reshape(shape), d_ucb.reshape(*shape, d_ucb.shape[-1])

    def context_gradient_norm(self, x: Tensor, contexts: Tensor, beta: float) -> Tensor:
        """||grad_c UCB(x_b, c_b)||_2 for candidates x [b, d_x] and one context each [b, d_c] -> [b],
        differentiable in x by its closed-form gradient (`context_gradient_jacobian`): WDRBO's
        differentiated L(x) at each candidate's maximising Lipschitz point. The values of
        `ucb_and_gradient`'s norm and the x-gradient of autograd's double backward through it,
        to rounding, in a few dozen operations on [b, n] arrays where the double backward takes
        many more, each at torch's fixed cost per call (`benchmarks/speed/routes.py adam-step`)."""
        return _ContextGradientNorm.apply(x, contexts, self, beta)


Array = TypeVar("Array", np.ndarray, Tensor)


def context_gradient_jacobian(
    xp: ModuleType, x: Array, contexts: Array, train: Array, lengthscale: Array, inverse: Array, weights: Array,
    beta: float,
) -> tuple[Array, Array]:
    """(L [b], dL/dx [b, d_x]) for L = ||g||, g = grad_c UCB(x, c) = dk_c^T alpha - beta N / sigma,
    N = dk_c^T w, w = K^{-1} k; written once for an array namespace `xp` (NumPy or torch).

    With u_ie = -(x_e - z_ie) / l_e^2 (so dk_i/dx_e = k_i u_ie and d(dk_c)_id/dx_e = (dk_c)_id u_ie):
    dN_d/dx_e = sum_i (dk_c)_id (u_ie w_i + (K^{-1} dk_x)_ie), dsigma/dx_e = -(dk_x^T w)_e / sigma,
    dg_d/dx_e = sum_i (dk_c)_id u_ie alpha_i - beta (dN_d/dx_e / sigma - N_d dsigma/dx_e / sigma^2),
    dL/dx = g^T dg/dx / L (0 where L = 0; dsigma = 0 where the variance is at its floor)."""
    dim_x = x.shape[-1]
    z = xp.concatenate([x, contexts], axis=-1)
    offset = z[:, None, :] - train[None, :, :]  # [b, n, D]
    scaled = offset / lengthscale**2  # -u
    k = xp.exp(-0.5 * (offset * scaled).sum(-1))  # [b, n]
    w = k @ inverse
    var = 1.0 - (w * k).sum(-1)
    sigma = xp.sqrt(xp.clip(var, min=VARIANCE_FLOOR))[:, None]  # [b, 1]
    dk = -k[..., None] * scaled  # dk_i / dz
    dk_c, dk_x = dk[..., dim_x:], dk[..., :dim_x]
    numerator = xp.einsum("bnd,bn->bd", dk_c, w)
    gradient = xp.einsum("bnd,n->bd", dk_c, weights) - beta * numerator / sigma  # [b, d_c]
    norm = xp.sqrt((gradient * gradient).sum(-1))
    # dg/dx = dk_c^T (u (alpha - beta w / sigma) - beta K^{-1} dk_x / sigma) + beta N dsigma / sigma^2
    inner = -scaled[..., :dim_x] * (weights - beta * w / sigma)[..., None] - (beta / sigma)[..., None] * (inverse @ dk_x)
    d_sigma = xp.where(var[:, None] > VARIANCE_FLOOR, -(dk_x * w[..., None]).sum(1) / sigma, 0.0)  # [b, d_x]
    d_gradient = dk_c.swapaxes(1, 2) @ inner + (beta / sigma**2)[..., None] * numerator[..., None] * d_sigma[:, None, :]
    jacobian = xp.einsum("bd,bde->be", gradient, d_gradient) / xp.clip(norm, min=1e-300)[:, None]
    return norm, xp.where(norm[:, None] > 0, jacobian, 0.0)


def _cpu_views(tensors: tuple[Tensor, ...]) -> list[np.ndarray]:
    """NumPy views of CPU tensors (no copy)."""
    return list(map(Tensor.numpy, tensors))


class _ContextGradientNorm(torch.autograd.Function):
    """`GaussianProcess.context_gradient_norm`: the forward pass forms the Jacobian, the backward
    pass scales it. On the CPU the arrays are small ([b, n]) and NumPy's cost per operation is a
    fraction of torch's; elsewhere torch computes the same formula on the device."""

    @staticmethod
    def forward(ctx, x: Tensor, contexts: Tensor, model: "GaussianProcess", beta: float) -> Tensor:  # type: ignore[override]
        arrays = (x.detach(), contexts, model.train_x, model.lengthscale, model.inverse, model.weights)
        if x.device.type == "cpu":
            norm, jacobian = map(torch.from_numpy, context_gradient_jacobian(np, *_cpu_views(arrays), beta))
        else:
            norm, jacobian = context_gradient_jacobian(torch, *arrays, beta)
        ctx.save_for_backward(jacobian)
        return norm

    @staticmethod
    def backward(ctx, grad_norm: Tensor) -> tuple[Tensor, None, None, None]:  # type: ignore[override]
        (jacobian,) = ctx.saved_tensors
        return grad_norm.unsqueeze(-1) * jacobian, None, None, None
