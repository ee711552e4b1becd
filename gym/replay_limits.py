"""What a bundle may ask of the machine that replays it: one list of fields, one check, for episode bundles
(gym/replay.py) and self-play chain bundles (gym/selfplay/chain_bundle.py) alike.

A bundle is a file someone handed you. Every field of it that reaches the host (which engine is dialed, which
image runs, which host path is written, how long and how large a check on the host may run) or loosens the
sandbox (budgets, isolation switches, the cwd allowlist, deadlines) is in ``LIMITS``, and ``vet`` applies them:

* **where** (kind ``place``: the engine or engines, their TLS files and labels, host CPUs, a log folder): never
  the bundle's. The replay runs on the replaying user's engine, resolved as every gym command resolves it
  (``DOCKER_HOST`` and the TLS environment, else the local socket), and writes nowhere the bundle names; the
  bundle's value is dropped and the report says so in a note. Where a replay runs cannot change its result.
* **how much, how isolated** (every other kind): the recorded value must be no looser than the hardened
  default: the default of the field's own config model (for SWE workspaces, the SWE budgets), except two
  wall clocks that only cost the replay time, allowed up to what the shipped SWE config records (900 s an
  episode, 120 s a call). A looser value refuses the bundle before anything starts: `BundleError`, one line
  naming the field, the value and the limit (`gym replay` exits 5). Clamping was not chosen: it would run a
  tampered bundle anyway and report an honest one that needed more as a difference nobody can explain.
  ``--trust-bundle-sandbox`` (bundles you wrote, e.g. kill-test runs) lets the sandbox-side fields through as
  recorded, never a host-side one (``host``): those bound work done on this machine outside any container.

Not listed, with the reason: ``grader.time_scale``/``min_time_s``/``speed_factor`` (a test's limit is cut to
``grader.max_time_s``, which is listed), ``grader.starved_grace_factor`` (cut to what the episode's wall clock
leaves), ``grader.python`` and ``tools.enabled`` (they run inside the sandbox), the chain bundle's parser bounds
(they bound parsing of the recorded tokens, which the file's size bounds), ``tokenizer`` (a spec such as
``hf:PATH`` is only read, by the tokenizers library, as any replay of an HF run must).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, TypeVar

from pydantic import BaseModel

from gym.bundle import BundleError
from gym.tools import ToolsConfig
from sandbox.config import (
    CallBudgets,
    DockerEngineConfig,
    EpisodeBudgets,
    Hardening,
    PoolConfig,
    WorkspaceBudgets,
)
from tasks.grader import GraderConfig
from tasks.math.grader import MathGraderConfig
from tasks.swe.family import SWE_BUDGETS
from tasks.swe.grader import SweGraderConfig

Kind = Literal["at_most", "equal", "under", "local_image", "place"]

# a local image name: no registry host, no namespace, no digest (the gym builds every image it runs)
LOCAL_IMAGE = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?")
SWE_EPISODE_WALL_S = 900.0  # configs/swe_smoke.yaml: the widest episode wall clock a shipped config records
SWE_CALL_S = 120.0  # configs/swe_smoke.yaml: the widest per-call deadline (tools.max_timeout_s)


@dataclass(frozen=True)
class Limit:
    """One field a bundle may not loosen (or, for ``place``, may not choose)."""

    field: str  # dotted path from the bundle's top level; a section a bundle lacks (swe on a CP bundle) is skipped
    kind: Kind
    bound: object = None  # at_most: the largest value; equal: the value; under: the roots; place: what replaces it
    host: bool = False  # bounds work on the host itself: --trust-bundle-sandbox does not cover it


def _at_most(section: str, defaults: BaseModel, names: str, *, host: bool = False) -> tuple[Limit, ...]:
    return tuple(Limit(f"{section}.{name}", "at_most", getattr(defaults, name), host) for name in names.split())


_BUDGETS = "memory_mb cpus pids workspace_mb workspace_inodes tmp_mb nofile fsize_mb"

LIMITS: tuple[Limit, ...] = (
    Limit("image", "local_image", host=True),
    Limit("sandbox.image", "local_image", host=True),
    Limit("sandbox.workdir", "equal", "/workspace"),
    Limit("sandbox.allowlist", "under", ("/workspace",)),
    *_at_most("sandbox.budgets", WorkspaceBudgets(), _BUDGETS),
    *_at_most("swe.budgets", SWE_BUDGETS, _BUDGETS),
    *(Limit(f"sandbox.hardening.{name}", "equal", value) for name, value in Hardening()),
    *_at_most("sandbox.calls", CallBudgets(), "timeout_s grace_s"),
    *_at_most("sandbox.calls", CallBudgets(), "output_limit_bytes", host=True),
    Limit("sandbox.episode.wall_s", "at_most", SWE_EPISODE_WALL_S),
    *_at_most("sandbox.episode", EpisodeBudgets(), "max_calls"),
    *_at_most("sandbox.pool", PoolConfig(), "size ttl_s max_concurrent_starts", host=True),
    Limit("tools.max_timeout_s", "at_most", SWE_CALL_S),
    *_at_most("tools", ToolsConfig(), "output_chars read_bytes", host=True),
    *_at_most("grader", GraderConfig(), "max_time_s backstop_factor backstop_s rerun_margin default_memory_bytes"),
    *_at_most("grader", GraderConfig(), "output_limit_bytes concurrency", host=True),
    *_at_most("swe.grader", SweGraderConfig(), "test_timeout_s setup_timeout_s"),
    *_at_most("swe.grader", SweGraderConfig(), "log_limit_bytes concurrency", host=True),
    *_at_most(
        "math",
        MathGraderConfig(),
        "timeout_s backstop_factor start_timeout_s memory_mb max_chars max_answers concurrency",
        host=True,
    ),
    Limit("sandbox.engine", "place", DockerEngineConfig()),
    Limit("sandbox.engines", "place", []),
    Limit("sandbox.require_labels", "place", []),
    Limit("sandbox.budgets.cpuset_cpus", "place", None),
    Limit("swe.budgets.cpuset_cpus", "place", None),
    Limit("swe.grader.log_dir", "place", None),
)

_ABSENT = object()
M = TypeVar("M", bound=BaseModel)


def _get(bundle: BaseModel, field: str) -> object:
    value: object = bundle
    for part in field.split("."):
        value = getattr(value, part, _ABSENT) if value is not None else _ABSENT
        if value is _ABSENT:
            return _ABSENT
    return value


def _inside(entry: str, roots: tuple[str, ...]) -> bool:
    return any(entry == root or entry.startswith(root.rstrip("/") + "/") for root in roots)


def loosened(limit: Limit, value: object) -> bool:
    """Whether ``value`` asks for more than ``limit`` allows (``place``: whether it names anything)."""
    if limit.kind == "at_most":  # None is no limit at all; `not <=` also catches NaN
        return value is None or not value <= limit.bound  # type: ignore[operator]
    if limit.kind == "under":
        return not all(isinstance(entry, str) and _inside(entry, limit.bound) for entry in value)  # type: ignore[arg-type,union-attr]
    if limit.kind == "local_image":  # the episode's own image may be none ('': an SWE instance never built)
        return not (
            isinstance(value, str) and (LOCAL_IMAGE.fullmatch(value) or (value == "" and limit.field == "image"))
        )
    return value != limit.bound


def _shown(value: object, limit: int = 80) -> str:
    if isinstance(value, BaseModel) or (isinstance(value, list) and value and isinstance(value[0], BaseModel)):
        value = _plain(value)
    text = repr(value) if not isinstance(value, int) or value.bit_length() < 256 else "an integer of 77+ digits"
    return text if len(text) <= limit else text[:limit] + "..."


def _plain(value: object) -> object:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_defaults=True)
    return [_plain(item) for item in value] if isinstance(value, list) else value


_WHY = {
    "at_most": "exceeds the hardened limit {}",
    "equal": "differs from the hardened value {}",
    "under": "reaches outside {}",
    "local_image": "is not a local image name (a registry host, a namespace or a digest)",
}


def _set(model: M, parts: list[str], value: object) -> M:
    head, *rest = parts
    if not rest:
        return model.model_copy(update={head: value})
    return model.model_copy(update={head: _set(getattr(model, head), rest, value)})


def vet(bundle: M, path: object, *, trust: bool = False) -> tuple[M, tuple[str, ...]]:
    """``bundle`` as it may be replayed here, and a note per field dropped (``place``); ``BundleError`` (one line:
    the first refused field, its value, its limit, how many more) when it asks for more than ``LIMITS`` allow."""
    refused: list[tuple[Limit, object]] = []
    notes: list[str] = []
    for limit in LIMITS:
        value = _get(bundle, limit.field)
        if value is _ABSENT or not loosened(limit, value):
            continue
        if limit.kind == "place":
            bundle = _set(bundle, limit.field.split("."), limit.bound)
            notes.append(f"{limit.field} = {_shown(value)} not used: where a replay runs and writes is this machine's")
        elif limit.host or not trust:
            refused.append((limit, value))
    if refused:
        (first, value), more = refused[0], [limit.field for limit, _ in refused[1:]]
        hint = (
            "a host-side bound, which not even --trust-bundle-sandbox lifts"
            if any(limit.host for limit, _ in refused)
            else "pass --trust-bundle-sandbox if you wrote this bundle"
        )
        also = f" (and {len(more)} more: {', '.join(more[:6])}{', ...' if len(more) > 6 else ''})" if more else ""
        why = _WHY[first.kind].format(_shown(first.bound))
        raise BundleError(f"{path}: refusing to replay: {first.field} = {_shown(value)} {why}{also}; {hint}")
    return bundle, tuple(notes)
