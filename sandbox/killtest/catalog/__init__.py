"""The attack catalog: one module per group, each a tuple ``ATTACKS`` of ``Attack`` entries.

Adding an attack is one entry in its group's module (data plus a small
program); names are unique across the catalog.
"""

from __future__ import annotations

from sandbox.killtest.attack import GROUPS, Attack
from sandbox.killtest.catalog import filesystem, information, kernel, lifetime, network, persistence, resources

CATALOG: tuple[Attack, ...] = (
    *resources.ATTACKS,
    *lifetime.ATTACKS,
    *network.ATTACKS,
    *filesystem.ATTACKS,
    *kernel.ATTACKS,
    *information.ATTACKS,
    *persistence.ATTACKS,
)


class UnknownAttack(ValueError):
    """A name given to ``--only`` is neither an attack nor a group."""


def select(names: list[str] | None, catalog: tuple[Attack, ...] = CATALOG) -> tuple[Attack, ...]:
    """The attacks named (attack names or group names), in catalog order; all when ``names`` is empty."""
    if not names:
        return catalog
    known = {a.name for a in catalog}
    unknown = [n for n in names if n not in known and n not in GROUPS]
    if unknown:
        raise UnknownAttack(f"unknown attack or group: {', '.join(unknown)} — see `python -m gym killtest --list`")
    wanted = set(names)
    return tuple(a for a in catalog if a.name in wanted or a.group in wanted)
