"""An algorithm option, declared once: its default in each fidelity profile, what values it
takes, and a note for `wdrbo-dist list`.

The one declaration serves the config check, `Algorithm.resolve_options`, the listing and the
MLflow params, so an option is checked by one rule everywhere: the type of its default (a float
option also takes an integer), numbers >= `minimum`, strings among `choices` when given.
"""

from __future__ import annotations

import math
import reprlib
from dataclasses import dataclass
from typing import Any, Union

OptionValue = Union[bool, int, float, str]

SHOWN_MAX = 80  # characters of a value quoted in an error message
_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = SHOWN_MAX
_SHORT.maxlong = 40
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = _SHORT.maxset = 6
_SHORT.maxlevel = 3


def shown(value: Any) -> str:
    """`repr(value)` cut to about 80 characters, built without the whole repr (a value may be huge)."""
    try:
        text = _SHORT.repr(value)
    except ValueError:  # an int of more than 4300 digits has no repr
        return f"<a {type(value).__name__} too long to show>"
    return text if len(text) <= SHOWN_MAX else text[: SHOWN_MAX - 3] + "..."


def describe(value: Any) -> str:
    """A value as an error message shows it: its type and short repr (`str 'high'`)."""
    if value is None:
        return "nothing"
    return f"{type(value).__name__} {shown(value)}" if not isinstance(value, (dict, list)) else type(value).__name__


@dataclass(frozen=True)
class Option:
    paper: OptionValue
    reference: OptionValue
    note: str = ""
    choices: tuple[str, ...] = ()  # strings: the allowed values (compared without case)
    minimum: float = 0.0  # numbers: the smallest allowed value

    @classmethod
    def same(cls, value: OptionValue, note: str = "", **kwargs: Any) -> "Option":
        """An option with the same default in both profiles."""
        return cls(value, value, note, **kwargs)

    def default(self, fidelity: str) -> OptionValue:
        return self.paper if fidelity == "paper" else self.reference

    def check(self, value: Any) -> OptionValue:
        """`value` as the option stores it; ValueError("must be ...") when it does not fit."""
        kind = self.paper
        if isinstance(kind, bool):
            if not isinstance(value, bool):
                raise ValueError(f"must be true or false, got {describe(value)}")
            return value
        if isinstance(kind, (int, float)):
            if isinstance(kind, int) and (isinstance(value, bool) or not isinstance(value, int)):
                raise ValueError(f"must be an integer, got {describe(value)}")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"must be a finite number, got {describe(value)}")
            if value < self.minimum:
                raise ValueError(f"must be >= {self.minimum:g}, got {shown(value)}")
            return value if isinstance(kind, int) else float(value)
        if not isinstance(value, str):
            raise ValueError(f"must be a string, got {describe(value)}")
        if self.choices:
            matches = [choice for choice in self.choices if choice.lower() == value.lower()]
            if not matches:
                raise ValueError(f"must be one of {', '.join(self.choices)}, got {shown(value)}")
            return matches[0]
        return value
