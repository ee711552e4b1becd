"""Environments by name: the project's shipped ones and those installed packages register.

Wherever an environment config file is accepted (``rollout CONFIG``, ``environment:`` and
``eval.environment:`` of a train config, ``bench ... --config``) a registered name works too:
``python -m gym rollout example_strings ...``. `environment_config` decides which: a spec that
names a file (it has a folder or a config suffix, or the file exists) is read as today; any other
spec is a name. A file of your own therefore always wins over a name.

Two kinds of names (``python -m gym envs list`` shows both):

- **shipped**: every environment config under the distribution's ``configs/`` (a YAML file with a
  top-level ``task_pool``), by its file stem: ``cp_smoke`` is ``configs/cp_smoke.yaml``.
- **installed**: entry points of the group ``code_rl_gym.environments`` (`GROUP`) declared by any
  installed distribution, found with `importlib.metadata.entry_points`. An entry point
  ``NAME = module:attribute`` names a callable that takes no argument and returns a
  `gym.environment_config.EnvironmentConfig`; `packaged` builds one from a YAML shipped inside the package,
  its task files beside it. Nothing is imported until a name is loaded (or listed).

A name must match `NAME` and is unique: one that two distributions register, or that a package
registers over a shipped environment, is refused (`RegistryError`, exit 2), as is a name nobody
registered, an entry point that fails to import or to run, and one whose callable returns anything
but an EnvironmentConfig. Each is one line naming the name, the distribution and the fix
(docs/environments.md).
"""

from __future__ import annotations

import importlib.metadata
import importlib.resources
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gym.environment_config import EnvironmentConfig, EnvironmentConfigError
from gym.overrides import Override
from sandbox.config_file import read_config
from sandbox.distribution import DISTRIBUTION, ROOT, resolve

GROUP = "code_rl_gym.environments"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
"""A registrable name: no folder separator, nothing a shell or a YAML scalar would mangle."""
CONFIG_SUFFIXES = (".yaml", ".yml", ".toml", ".json")
"""A spec ending in one of these is a file, never a name."""
LIST_HINT = "`python -m gym envs list` shows the registered names"


class RegistryError(EnvironmentConfigError):
    """A name that is not registered or registered twice, or an entry point that cannot give an
    environment; the message names the name and its distribution and ends with the fix."""


@dataclass(frozen=True)
class Registered:
    """One registered environment: a shipped config file or an installed entry point."""

    name: str
    distribution: str
    version: str
    source: str  # the shipped file (relative to the distribution's root) or the entry point's ``module:attribute``
    path: Path | None = None  # shipped: the config file
    entry_point: importlib.metadata.EntryPoint | None = None  # installed: the entry point

    @property
    def shipped(self) -> bool:
        return self.path is not None

    def where(self) -> str:
        """How messages name it: ``'NAME' (distribution D, module:attribute)``."""
        return f"environment {self.name!r} ({self.distribution} {self.version}, {self.source})"


def is_name(spec: str | Path) -> bool:
    """Whether ``spec`` reads as a registered name rather than a config file path."""
    text = str(spec)
    return NAME.fullmatch(text) is not None and not text.lower().endswith(CONFIG_SUFFIXES)


def names_file(spec: str | Path) -> bool:
    """Whether ``spec`` is read as a config file: path-like, or a file that exists (yours wins over a name)."""
    return not is_name(spec) or resolve(spec).is_file()


def shipped() -> list[Registered]:
    """The distribution's own environment configs (``configs/*.yaml`` holding a ``task_pool``), by file stem."""
    version = _version(DISTRIBUTION)
    found = []
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        try:
            data = read_config(path)
        except ValueError:  # a broken shipped file is not an environment one can name; reading it by path says why
            continue
        if isinstance(data, dict) and "task_pool" in data:
            found.append(Registered(path.stem, DISTRIBUTION, version, f"configs/{path.name}", path=path))
    return found


def installed() -> list[Registered]:
    """The entry points of `GROUP` of every installed distribution (none is imported)."""
    found = []
    for entry in importlib.metadata.entry_points(group=GROUP):
        dist = entry.dist
        name, version = (dist.name, dist.version) if dist is not None else ("(unknown distribution)", "")
        found.append(Registered(entry.name, name, version, entry.value, entry_point=entry))
    return found


def registered() -> list[Registered]:
    """Shipped and installed environments, by name (a name registered twice appears twice)."""
    return sorted(shipped() + installed(), key=lambda r: (r.name, not r.shipped, r.distribution))


def problem(entry: Registered, everything: Sequence[Registered]) -> str | None:
    """Why ``entry`` cannot be loaded by name without loading it (a bad or shared name), else None."""
    if NAME.fullmatch(entry.name) is None or entry.name.lower().endswith(CONFIG_SUFFIXES):
        return (
            f"{entry.where()}: the name is not usable: a name is letters, digits, '_', '.', '-' and does not "
            f"end in {'/'.join(CONFIG_SUFFIXES)} — rename the entry point in {entry.distribution}'s "
            "[project.entry-points] table"
        )
    sharing = [r for r in everything if r.name == entry.name]
    if len(sharing) < 2:
        return None
    owners = ", ".join(sorted({r.distribution for r in sharing if not r.shipped}))
    ours = next((r for r in sharing if r.shipped), None)
    if ours is not None:
        return (
            f"environment {entry.name!r}: {owners} registers the name of the shipped {ours.source} — rename its "
            f"entry point, or uninstall it (pip uninstall {owners.split(', ')[0]}); the shipped one stays "
            f"reachable by its path, {ours.source}"
        )
    return (
        f"environment {entry.name!r} is registered by more than one entry point ({owners}) — "
        "uninstall all but one of them (pip uninstall NAME) or rename an entry point"
    )


def lookup(name: str) -> Registered:
    """The one environment registered under ``name``; RegistryError when none or several are."""
    everything = registered()
    matches = [r for r in everything if r.name == name]
    if not matches:
        known = ", ".join(sorted({r.name for r in everything})) or "none"
        raise RegistryError(
            f"no environment file or registered environment named {name!r} (registered: {known}) — pass a "
            f"config file path, or install the package that registers it; {LIST_HINT}"
        )
    why = problem(matches[0], everything)
    if why is not None:
        raise RegistryError(why)
    return matches[0]


def load(entry: Registered, overrides: Sequence[Override] = ()) -> EnvironmentConfig:
    """The EnvironmentConfig of a registered environment, ``overrides`` applied (gym.overrides)."""
    if entry.path is not None:
        return EnvironmentConfig.from_file(entry.path, overrides=overrides)
    config = _call(entry)
    if not overrides:
        return config
    return EnvironmentConfig.from_dict(
        config.model_dump(mode="json"), source=f"environment {entry.name!r}", overrides=overrides
    )


def _call(entry: Registered) -> EnvironmentConfig:
    """Import the entry point and call what it names. A package's own code can fail in any way: every
    failure is turned into one RegistryError naming it (the traceback stays available under ``-v``)."""
    assert entry.entry_point is not None
    fix = f"fix or reinstall {entry.distribution}, or uninstall it (pip uninstall {entry.distribution})"
    try:
        target = entry.entry_point.load()
    except Exception as exc:  # ImportError, SyntaxError, AttributeError, or whatever the module raises on import
        raise RegistryError(f"{entry.where()}: cannot be imported: {_said(exc)} — {fix}") from exc
    if not callable(target):
        raise RegistryError(
            f"{entry.where()}: names a {type(target).__name__}, not a callable returning an EnvironmentConfig — {fix}"
        )
    try:
        config = target()
    except Exception as exc:  # the package's function: an invalid shipped YAML, a missing file, a bug
        raise RegistryError(f"{entry.where()}: failed: {_said(exc)} — {fix}") from exc
    if not isinstance(config, EnvironmentConfig):
        raise RegistryError(
            f"{entry.where()}: returned a {type(config).__name__}, not a gym.environment_config.EnvironmentConfig — {fix}"
        )
    return config


def environment_config(spec: str | Path, overrides: Sequence[Override] = ()) -> EnvironmentConfig:
    """The environment a config file or a registered name (module docstring) defines, ``overrides`` applied."""
    if names_file(spec):
        return EnvironmentConfig.from_file(spec, overrides=overrides)
    return load(lookup(str(spec)), overrides)


def environment_data(spec: str | Path, error: Any = EnvironmentConfigError) -> Any:
    """The mapping a config file or a registered name holds, before validation (for overrides that reach
    into a train config's ``environment``); a file's problems raise ``error``."""
    if names_file(spec):
        return read_config(spec, error)
    entry = lookup(str(spec))
    return read_config(entry.path, error) if entry.path is not None else _call(entry).model_dump(mode="json")


def packaged(package: str, resource: str = "environment.yaml") -> EnvironmentConfig:
    """The EnvironmentConfig of a YAML (or TOML) file shipped inside ``package`` (an entry point's usual body).

    Relative ``path``, ``solutions`` and ``repos_dir`` of its task pools are relative to that file's folder,
    not to the working directory, so the task files ship beside it as package data."""
    file = importlib.resources.files(package).joinpath(resource)
    if not isinstance(file, Path):  # a zipped package: tasks are read from real files later
        raise EnvironmentConfigError(f"{package}/{resource}: the package must be installed as files, not zipped")
    data = read_config(file, EnvironmentConfigError)
    if isinstance(data, dict):
        _rebase(data, file.parent)
    return EnvironmentConfig.from_dict(data, source=str(file))


def _rebase(data: dict, folder: Path) -> None:
    """Make the relative file paths of ``data``'s task pools relative to ``folder`` (in place); anything
    malformed is left for validation to name."""
    pool = data.get("task_pool")
    if not isinstance(pool, dict):
        return
    sources = pool.get("sources") if pool.get("type") == "mixture" else [{"pool": pool}]
    for source in sources if isinstance(sources, list) else []:
        leaf = source.get("pool") if isinstance(source, dict) else None
        for key in ("path", "solutions", "repos_dir"):
            value = leaf.get(key) if isinstance(leaf, dict) else None
            if isinstance(value, str) and not Path(value).is_absolute():
                leaf[key] = str(folder / value)


def describe(entry: Registered) -> str:
    """What it is: the shipped file's first comment line, or the first line of the entry point's docstring
    (this imports the package; a failure raises RegistryError)."""
    if entry.path is not None:
        return _first_sentence(entry.path.read_text(encoding="utf-8"))
    _call(entry)  # imported, run and type-checked: a broken entry point is reported, not described
    doc = getattr(entry.entry_point.load(), "__doc__", None) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def _first_sentence(text: str) -> str:
    """The first sentence of a config file's leading comment (its lines up to an indented example line)."""
    words = []
    for line in text.splitlines():
        if not line.startswith("#") or line.startswith("#  "):
            break
        words += line.lstrip("#").split()
    said = " ".join(words)
    end = re.search(r"\.(\s|$)", said)
    return said[: end.start() + 1] if end else said


def _said(exc: BaseException) -> str:
    """``Class: message`` on one line (gym.fault.one_line joins a multi-line message with "; ")."""
    from gym.fault import one_line

    text = one_line(str(exc))
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:  # a checkout run in place
        from gym.cli import version

        return version()
