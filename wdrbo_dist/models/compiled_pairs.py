"""The compiled UCB at every (candidate, context) pair that DRBO-KDE, the minimax and StableOpt
take a function of: over fixed contexts, differentiable in x (`CompiledPairs`), and over contexts
drawn afresh at every call (`CompiledFreshPairs`). The kernels: ucb_kernels.py."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from wdrbo_dist.models.compiled_ucb import host_arrays, identity_is_cheaper
from wdrbo_dist.models.context_features import REGION_RESIDUAL_MAX, ContextFeatures, Region
from wdrbo_dist.models.gp import GaussianProcess
from wdrbo_dist.models.kernel import numerical_basis, rbf
from wdrbo_dist.models.ucb_kernels import fresh_pair_values, fresh_vectors, pair_gradient, pair_values


class CompiledPairs:
    """x [b, d_x] -> the UCB at every pair (x_b, c_j) [b, N] of fixed contexts c_j, differentiable
    in x through one kernel each way: the forward pass returns the values, the backward pass
    takes d(loss)/du [b, N] (any function of the values, as DRBO-KDE's sorted-weight sum or the
    minimax's closed form) and returns d(loss)/dx. It is the mean-term kernel's arithmetic with a
    weight per pair, w_bj = d(loss)/du_bj, in place of one per context: G_b = sum_j w_bj/sigma_bj
    a_j a_j^T and u_b = sum_j w_bj kc_j (the comment above `compiled_ucb.CompiledUCB`)."""

    def __init__(self, arguments: tuple, identity: bool, sparse_backward: bool = False) -> None:
        self.arguments = arguments  # train, lengthscale, K^{-1}, alpha, constant mean, beta, V, identity, a [N, r], kc [N, n]
        self.identity = identity
        # The backward pass leaves out the contexts whose weight is zero for every candidate (the
        # minimax's: terms of zero; the sums over the others change order, and their last digits).
        self.sparse_backward = sparse_backward

    @classmethod
    def build(cls, model: GaussianProcess, contexts: Tensor, beta: float,
              features: ContextFeatures | None = None, sparse_backward: bool = False) -> "CompiledPairs | None":
        """None off the CPU or float64; V = I where the basis saves no work (the same rule).
        `features`: the GP's context features of the same contexts (no gradient contexts), whose
        vectors and, on the basis route, basis are the ones this would compute (the same
        arithmetic on the same inputs), so they are not computed twice."""
        if any(t.device.type != "cpu" or t.dtype != torch.float64 for t in (model.train_x, contexts)):
            return None
        dim_c, n = contexts.shape[-1], model.n
        shared = features is not None and features.n_gradient == 0
        if shared:
            vectors = features.mean.T.contiguous()  # [N, n]: rbf's bits, as below
        else:
            vectors = rbf(contexts, model.train_x[:, -dim_c:], model.lengthscale[-dim_c:])  # [N, n]
        if shared and features.span is not None:
            basis = features.span  # numerical_basis(vectors)'s V
        else:
            basis, _ = numerical_basis(vectors)
        identity = identity_is_cheaper(n, basis.shape[1], vectors.shape[0])
        if identity:
            basis, coefficients = basis.new_empty(n, 0), vectors
        else:
            coefficients = vectors @ basis
        arrays = (model.train_x, model.lengthscale, model.inverse, model.weights, float(model.mean_constant),
                  float(beta), basis, identity, coefficients, vectors)
        return cls(host_arrays(arrays), identity, sparse_backward)

    def __call__(self, x: Tensor) -> Tensor:
        return _CompiledPairValues.apply(x, self)

    def values(self, x: Tensor) -> tuple[Tensor, tuple]:
        """The UCB [b, N] without autograd, and what `gradient` needs of this pass."""
        host_x = np.ascontiguousarray(x.detach().numpy())
        values, inverse_sigma, kx, solved = pair_values(host_x, *self.arguments)
        return torch.from_numpy(values), (host_x, inverse_sigma, kx, solved)

    def gradient(self, kept: tuple, weights: Tensor) -> Tensor:
        """d(sum_bj weights_bj u_bj)/dx [b, d_x] at the pass `kept` (from `values`): the backward
        pass for d(loss)/du = weights."""
        host_x, inverse_sigma, kx, solved = kept
        train, lengthscale, _, alpha, _, beta, basis, identity, coefficients, vectors = self.arguments
        host_weights = np.ascontiguousarray(weights.detach().numpy())
        used = np.flatnonzero(host_weights.any(axis=0)) if self.sparse_backward else None
        if used is not None and used.size < host_weights.shape[1]:
            coefficients, vectors = coefficients[used], vectors[used]
            inverse_sigma, host_weights = (np.ascontiguousarray(inverse_sigma[:, used]),
                                           np.ascontiguousarray(host_weights[:, used]))
        return torch.from_numpy(pair_gradient(host_x, train, lengthscale, alpha, beta, basis, identity,
                                               coefficients, vectors, kx, solved, inverse_sigma, host_weights))


class CompiledFreshPairs:
    """(x [b, d_x], contexts [N, d_c]) -> the UCB at every pair [b, N], without gradient, for
    contexts drawn afresh at every call (StableOpt's box, DRBO-KDE's m(x)): the pair kernel's
    forward pass, the contexts' vectors projected onto `region` (a `GaussianProcess.region_basis`
    of their box, built once) where that basis saves work and spans them, else V = I."""

    def __init__(self, model: GaussianProcess, beta: float, region: Region | None) -> None:
        self.arguments = host_arrays((model.train_x, model.lengthscale, model.inverse, model.weights,
                                       float(model.mean_constant), float(beta)))
        self.region = None if region is None else host_arrays((region.basis,))[0]
        self.residual_max = REGION_RESIDUAL_MAX if region is None else region.residual_max
        self.n = model.n

    @classmethod
    def build(cls, model: GaussianProcess, beta: float, region: Region | None) -> "CompiledFreshPairs | None":
        """None off the CPU or float64."""
        if model.train_x.device.type != "cpu" or model.train_x.dtype != torch.float64:
            return None
        return cls(model, beta, region)

    def __call__(self, x: Tensor, contexts: Tensor) -> Tensor:
        host_x = np.ascontiguousarray(x.detach().numpy())
        host_contexts = np.ascontiguousarray(contexts.detach().numpy())
        values = fresh_pair_values(host_x, host_contexts, *self.arguments, self.region_for(contexts.shape[0]),
                                    self.residual_max)
        return torch.from_numpy(values)

    def minimum(self, x: Tensor, contexts: Tensor) -> Tensor:
        """min_j u(x_b, c_j) [b], differentiable in x: the gradient is that of each candidate's UCB
        at its first minimising context (torch.min's choice), by the pair kernel's backward
        arithmetic over those b contexts only."""
        return _CompiledFreshMinimum.apply(x, contexts, self)

    def minimum_values(self, x: Tensor, contexts: Tensor) -> tuple[Tensor, tuple]:
        """`minimum`'s values [b] without autograd, and what `minimum_gradient` needs of this pass:
        each candidate's minimising context's coefficients, vector and 1/sigma."""
        host_x = np.ascontiguousarray(x.detach().numpy())
        train, lengthscale, inverse, alpha, mean_constant, beta = self.arguments
        region = self.region_for(contexts.shape[0])
        coefficients, vectors, identity = fresh_vectors(np.ascontiguousarray(contexts.detach().numpy()), train,
                                                         lengthscale, region, self.residual_max)
        values, inverse_sigma, kx, solved = pair_values(host_x, train, lengthscale, inverse, alpha, mean_constant,
                                                         beta, region, identity, coefficients, vectors)
        index = values.argmin(axis=1)  # the first minimiser, as torch.min
        rows = np.arange(index.size)
        kept = (host_x, region, identity, coefficients[index], vectors[index], np.diag(inverse_sigma[rows, index]),
                kx, solved)
        return torch.from_numpy(values[rows, index]), kept

    def minimum_gradient(self, kept: tuple, weights: Tensor) -> Tensor:
        """d(sum_b weights_b min_j u_bj)/dx [b, d_x] at the pass `kept` (from `minimum_values`)."""
        host_x, region, identity, coefficients, vectors, inverse_sigma, kx, solved = kept
        train, lengthscale, _, alpha, _, beta = self.arguments
        host_weights = np.diag(np.ascontiguousarray(weights.detach().numpy()))  # candidate b: its own context
        return torch.from_numpy(pair_gradient(host_x, train, lengthscale, alpha, beta, region, identity,
                                               coefficients, vectors, kx, solved, inverse_sigma, host_weights))

    def region_for(self, contexts: int) -> np.ndarray:
        """The region basis, or an [n, 0] array (V = I) where the basis saves no work."""
        rank = 0 if self.region is None else self.region.shape[1]
        return np.empty((self.n, 0)) if identity_is_cheaper(self.n, rank, contexts) else self.region


class _CompiledPairValues(torch.autograd.Function):
    """The forward pass keeps what the backward pass's kernel needs: kx, S_b and 1/sigma."""

    @staticmethod
    def forward(ctx, x: Tensor, pairs: CompiledPairs) -> Tensor:  # type: ignore[override]
        values, ctx.kept = pairs.values(x)
        ctx.pairs = pairs
        return values

    @staticmethod
    def backward(ctx, grad_values: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        return ctx.pairs.gradient(ctx.kept, grad_values), None


class _CompiledFreshMinimum(torch.autograd.Function):
    """The forward pass keeps, for each candidate, its minimising context's coefficients, vector
    and 1/sigma; the backward pass is `pair_gradient` with one weight per candidate."""

    @staticmethod
    def forward(ctx, x: Tensor, contexts: Tensor, pairs: CompiledFreshPairs) -> Tensor:  # type: ignore[override]
        values, ctx.kept = pairs.minimum_values(x, contexts)
        ctx.pairs = pairs
        return values

    @staticmethod
    def backward(ctx, grad_value: Tensor) -> tuple[Tensor, None, None]:  # type: ignore[override]
        return ctx.pairs.minimum_gradient(ctx.kept, grad_value), None, None
