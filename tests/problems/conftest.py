"""Shared fixtures of the problem tests: one instance per (problem, fidelity) for the session."""

from __future__ import annotations

import pytest
import torch

from wdrbo_dist.problems import Problem, make_problem


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Run these tests on one thread (they are memory-bound, and faster so on a shared machine)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def problems() -> dict[tuple[str, str], Problem]:
    """A lazily filled cache, so the QMC nodes and the portfolio solve are built once."""
    return {}


@pytest.fixture(scope="session")
def get_problem(problems: dict[tuple[str, str], Problem]):
    def get(name: str, fidelity: str = "paper") -> Problem:
        key = (name, fidelity)
        if key not in problems:
            problems[key] = make_problem(name, fidelity)  # type: ignore[arg-type]
        return problems[key]

    return get

