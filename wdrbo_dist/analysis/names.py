"""How the report names things: problems and algorithms by their display names, and which
method is the reference that the others are tested against (`--reference`, default WDRBO)."""

from __future__ import annotations

from collections.abc import Sequence

REFERENCE_ALGORITHM = "wdrbo"  # the default of --reference



def resolve_reference(algorithms: Sequence[str], requested: str | None = None) -> tuple[str | None, str]:
    """The reference method's label (`requested`, else REFERENCE_ALGORITHM) and, when the study
    lacks it, None and the one line the page shows in place of what compares against it."""
    label = requested or REFERENCE_ALGORITHM
    if label in algorithms:
        return label, ""
    how = "--reference" if requested else "the default reference; choose one with --reference LABEL"
    return None, (f"No reference method: {label!r} is not a method of this study ({how}; its methods: "
                  f"{', '.join(algorithms) or 'none'}), so the tests against it and the probabilities of "
                  "improvement are left out.")


def algorithm_name(name: str) -> str:
    """The display name the algorithm's class declares (the key itself if it is not registered)."""
    from wdrbo_dist.acquisition.registry import ALGORITHMS

    return ALGORITHMS[name].display_name if name in ALGORITHMS else name


def problem_name(name: str) -> str:
    """The display name the problem's class declares (the key itself if it is not registered)."""
    from wdrbo_dist.problems import PROBLEMS

    return PROBLEMS[name].display_name if name in PROBLEMS else name
