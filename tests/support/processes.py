"""The machine's processes as /proc shows them, for tests that check what a driver leaves running."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple


class Process(NamedTuple):
    parent: int
    group: int
    state: str


def processes() -> dict[int, Process]:
    """pid -> (parent pid, process group, state) of every process now, zombies included."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            found[int(entry.name)] = Process(int(fields[1]), int(fields[2]), fields[0])
    return found


def living() -> dict[int, int]:
    """pid -> parent pid of every process that has not ended (zombies left out: they are gone)."""
    return {pid: p.parent for pid, p in processes().items() if p.state != "Z"}


def descendants(root: int, parents: dict[int, int] | None = None) -> set[int]:
    """Every process below `root` (children, their children, ...), `root` left out."""
    parents = living() if parents is None else parents
    tree, grew = {root}, True
    while grew:
        found = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= found
        grew = bool(found)
    return tree - {root}


def group_alive(group: int) -> bool:
    """Whether a process of process group `group` has not ended."""
    return any(p.group == group and p.state != "Z" for p in processes().values())
