"""A study file read as YAML, safely: aliases only while the file they expand to stays small (an
alias bomb is refused before anything walks it), no deep nesting, no value YAML cannot convert;
each refusal is a `ConfigError` of one line with the line it is at."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from wdrbo_dist.acquisition.options import shown
from wdrbo_dist.errors import one_line

YAML_MAX_DEPTH = 50  # nested lists and mappings: a study needs 4
YAML_MAX_VALUES = 100_000  # values once aliases are expanded: a 10^5-seed study list is the most a study needs


class ConfigError(ValueError):
    """A bad study file; the message is one line naming the field and its allowed values."""


def read_yaml(path: str | os.PathLike[str]) -> Any:
    """The study file at `path` as plain data (mappings, lists, scalars), read safely."""
    source = Path(path)
    try:
        raw = source.read_bytes()
    except OSError as exc:
        raise ConfigError(f"config: cannot read {shown(str(source))}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(f"config: not UTF-8 text: byte {raw[exc.start]:#04x} at line {line}") from None
    loader: _StudyLoader | None = None
    try:
        loader = _StudyLoader(text)  # its reader refuses control characters at once
        data = loader.get_single_data()
    except yaml.YAMLError as exc:
        raise ConfigError(f"config: not valid YAML{_yaml_where(exc, text)}: {_yaml_problem(exc)}") from None
    finally:
        if loader is not None:
            loader.dispose()
    if loader.first_alias and _expanded_size(data) > YAML_MAX_VALUES:
        raise ConfigError(f"config: YAML aliases (*{loader.first_alias[0]}, line {loader.first_alias[1]}) expand this "
                          f"file to over {YAML_MAX_VALUES} values; write the study out without them")
    return data


def _expanded_size(data: Any) -> int:
    """How many values `data` holds with every alias expanded, counted up to YAML_MAX_VALUES + 1
    (shared lists are walked each time they are reached, as any reader of the study would)."""
    count, stack = 0, [data]
    while stack and count <= YAML_MAX_VALUES:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return count


class _StudyLoader(yaml.SafeLoader):
    """YAML's safe loader without deep nesting or integers too long to convert, that notes its
    first alias. An alias shares its anchor's object, so loading expands nothing; nine nested
    anchors of nine aliases each (500 bytes) stand for 387 million values to whatever walks them,
    which `read_yaml` refuses first."""

    _depth = 0
    first_alias: tuple[str, int] | None = None

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        event = self.peek_event()
        line = event.start_mark.line + 1 if event.start_mark else 0
        if isinstance(event, yaml.AliasEvent) and self.first_alias is None:
            self.first_alias = (one_line(event.anchor, 40), line)
        if self._depth >= YAML_MAX_DEPTH:
            raise ConfigError(f"config: YAML nested deeper than {YAML_MAX_DEPTH} levels at line {line}")
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except ConfigError:
            raise
        except ValueError as exc:  # 2001-13-45, an integer of over 4300 digits
            raise ConfigError(f"config: a value YAML cannot convert at line {node.start_mark.line + 1}: "
                              f"{one_line(exc, 100)}") from None


def _yaml_where(exc: yaml.YAMLError, text: str) -> str:
    """' at line L, column C' of a parser error, ' at line L' of a reader error (bad character)."""
    mark = getattr(exc, "problem_mark", None)
    if mark is not None:
        return f" at line {mark.line + 1}, column {mark.column + 1}"
    position = getattr(exc, "position", None)
    return f" at line {text[:position].count(chr(10)) + 1}" if isinstance(position, int) else ""


def _yaml_problem(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None) or getattr(exc, "reason", None) or "invalid YAML"
    return one_line(problem, 150)
