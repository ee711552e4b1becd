"""One task id everywhere: a pool's ``id_prefix`` names its tasks in rollouts, bundles and solutions files
(``taco/0``), and ``gym grade --id-prefix taco/`` names the file's tasks the same way; when solutions name tasks a
file does not hold, the message lists a few ids it does hold and the prefix that would make them match.

Pure string work on the ids (`prefixed`, `unknown_ids_hint`); the loaders keep a row's own id (`field.task_id`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from pydantic import BaseModel

Named = TypeVar("Named", bound=BaseModel)  # a task of any family, or a finding about one: it has a task_id

SHOWN = 5  # valid ids listed in a message
SAMPLED = 100  # unknown ids a prefix is looked for in
MAX_ID_CHARS = 256  # of each


def prefixed(tasks: Sequence[Named], prefix: str) -> list[Named]:
    """``tasks`` (or anything naming one by ``task_id``) with ``prefix`` before each id, as a task pool's
    ``id_prefix`` names them."""
    return [task.model_copy(update={"task_id": prefix + task.task_id}) for task in tasks] if prefix else list(tasks)


def unknown_ids_hint(known: Sequence[str], unknown: Sequence[str]) -> str:
    """What to tell a user whose solutions name ``unknown`` ids: a few ``known`` ids, and the ``--id-prefix`` that
    would match them all when one does (solutions of a rollout carry its pool's prefix: ``taco/0`` for ``0``), or
    the prefix to drop when the file's ids carry one the solutions lack."""
    known_set = set(known)
    shown = ", ".join(repr(i) for i in list(known)[:SHOWN])
    more = f" and {len(known) - SHOWN} more" if len(known) > SHOWN else ""
    text = f"the tasks file holds {shown}{more}" if known else "the tasks file holds no task"
    if not unknown:
        return text
    sample = [i[:MAX_ID_CHARS] for i in list(unknown)[:SAMPLED]]  # bounded: a file may name a million ids
    prefixes = {i[: k + 1] for i in sample for k, char in enumerate(i) if char == "/"}
    for prefix in sorted(prefixes, key=lambda p: (len(p), p)):
        if any(i.startswith(prefix) and i[len(prefix) :] in known_set for i in sample):
            return f"{text}; the solutions' ids carry the prefix {prefix!r}: pass --id-prefix {prefix}"
    return text
