"""SWE patch-task instances in the published SWE-bench / SWE-Gym schema, and their loader.

A row carries ``instance_id, repo, base_commit, patch, test_patch,
problem_statement, hints_text, version, FAIL_TO_PASS, PASS_TO_PASS,
environment_setup_commit`` (F2P/P2P either JSON-encoded strings, as the hubs
publish them, or lists). Three optional fields of ours:

* ``source``: where the repository comes from. ``{"type": "git"}`` (the
  default): a local clone ``DIR/owner__name`` under ``--repos-dir DIR``.
  ``{"type": "sdist", "package": ..., "version": ...}``: a shipped instance,
  whose clone ``python -m gym tasks build-swe`` makes from the package's sdist.
* ``install``: pip requirements installed into the environment image besides
  the repository itself (default: ``["pytest"]``); the repository is always
  installed editable, so its own metadata brings its runtime dependencies.
* ``test_cmd``: the test command run from the repository root (default:
  ``python -m pytest -rA`` on the files ``test_patch`` touches).
* ``plugins``: the pytest plugins the tests need (import names, e.g.
  ``["xdist.plugin"]``; default none). The grader turns plugin autoloading
  off and loads exactly these with ``-p`` (`tasks.swe.grader`).

Unknown fields (``created_at``, ...) are ignored; a malformed row is reported
with the field at fault and skipped.
"""

from __future__ import annotations

import json
import logging
import shlex
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from tasks.errors import MalformedRow
from tasks.source import Reader, RowError, read_rows
from tasks.swe.diff import touched_paths

log = logging.getLogger(__name__)

DEFAULT_INSTALL = ("pytest",)
DEFAULT_TEST_CMD = "python -m pytest -rA"
FIELDS = (
    "instance_id",
    "repo",
    "base_commit",
    "patch",
    "test_patch",
    "problem_statement",
    "hints_text",
    "version",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
    "environment_setup_commit",
    "source",
    "install",
    "test_cmd",
    "plugins",
)


class GitSource(BaseModel):
    """The repository is a local clone ``DIR/owner__name`` under ``--repos-dir DIR``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: Literal["git"] = "git"


class SdistSource(BaseModel):
    """A shipped instance: the clone is made from this sdist by ``python -m gym tasks build-swe``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: Literal["sdist"] = "sdist"
    package: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", description="distribution name on the registry")
    version: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9.+!_-]*$", description="pinned version")

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


Source = Annotated[GitSource | SdistSource, Field(discriminator="type")]


class SweInstance(BaseModel):
    """One patch task. ``patch``/``test_patch`` are unified git diffs against ``base_commit``."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    instance_id: str = Field(min_length=1, pattern=r"^[^\s/]+$")
    repo: str = Field(pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$", description="owner/name")
    base_commit: str = Field(pattern=r"^[0-9a-f]{7,64}$")
    patch: str = Field(description="the gold patch (source files only)")
    test_patch: str = Field(min_length=1, description="the tests that judge the task; never shown to the agent")
    problem_statement: str
    hints_text: str = ""
    version: str = ""
    fail_to_pass: tuple[str, ...] = Field(alias="FAIL_TO_PASS", min_length=1)
    pass_to_pass: tuple[str, ...] = Field(alias="PASS_TO_PASS")
    environment_setup_commit: str = Field("", pattern=r"^([0-9a-f]{7,64})?$")
    source: Source = Field(default_factory=GitSource)
    install: tuple[str, ...] = DEFAULT_INSTALL
    test_cmd: str | None = None
    plugins: tuple[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")], ...] = ()

    @field_validator("fail_to_pass", "pass_to_pass", "install", "plugins", mode="before")
    @classmethod
    def _json_list(cls, value: Any) -> Any:
        """Hubs publish these lists JSON-encoded; decode, never guess (a bare string is an error)."""
        if not isinstance(value, str):
            return value
        try:
            return json.loads(value)
        except json.JSONDecodeError as err:
            raise ValueError(f"a JSON-encoded list was expected: {err}") from err

    @property
    def task_id(self) -> str:
        """The id the gym knows the instance by (episodes, trajectories, bundles)."""
        return self.instance_id

    @property
    def clone_name(self) -> str:
        """The directory name of the local clone (``owner__name``, the SWE-bench layout)."""
        return self.repo.replace("/", "__")

    def test_files(self) -> list[str]:
        """The paths ``test_patch`` touches, in order (deleted files included)."""
        return touched_paths(self.test_patch)

    def command(self) -> str:
        """The shell command that runs this instance's tests from the repository root."""
        if self.test_cmd:
            return self.test_cmd
        files = [path for path in self.test_files() if path.endswith(".py")]
        return " ".join([DEFAULT_TEST_CMD, *(shlex.quote(path) for path in files)])

    def row(self) -> dict[str, Any]:
        """The published row shape (F2P/P2P JSON-encoded, as the hubs publish them)."""
        data = self.model_dump(by_alias=True, mode="json")
        data["FAIL_TO_PASS"] = json.dumps(list(self.fail_to_pass))
        data["PASS_TO_PASS"] = json.dumps(list(self.pass_to_pass))
        if self.test_cmd is None:
            del data["test_cmd"]
        return data


class InstanceLoad(BaseModel):
    """The instances of a file, and each skipped row with its index and reason."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str
    instances: tuple[SweInstance, ...]
    errors: tuple[RowError, ...]

    def by_id(self) -> dict[str, SweInstance]:
        return {instance.instance_id: instance for instance in self.instances}


def parse_row(row: dict[str, Any]) -> SweInstance:
    """One row as an instance; a `MalformedRow` names the first field at fault."""
    known = {key: value for key, value in row.items() if key in FIELDS}
    for key in ("hints_text", "version", "environment_setup_commit", "source", "install", "test_cmd"):
        if known.get(key) is None:
            known.pop(key, None)  # parquet writes an absent optional field as null
    try:
        instance = SweInstance.model_validate(known)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "row"
        raise MalformedRow(f"field {where!r}: {first['msg']}") from err
    if not instance.environment_setup_commit:
        instance = instance.model_copy(update={"environment_setup_commit": instance.base_commit})
    return instance


def load_instances(path: Path, reader: Reader = "auto") -> InstanceLoad:
    """Every instance of a jsonl/json/parquet/arrow file (parquet and arrow through ``datasets``)."""
    instances: list[SweInstance] = []
    errors: list[RowError] = []
    seen: set[str] = set()
    for index, row in read_rows(Path(path), reader):
        if isinstance(row, RowError):
            errors.append(row)
            continue
        try:
            instance = parse_row(row)
        except MalformedRow as err:
            errors.append(RowError(index=index, reason=str(err)))
            continue
        if instance.instance_id in seen:
            errors.append(RowError(index=index, reason=f"field 'instance_id': duplicate {instance.instance_id!r}"))
            continue
        seen.add(instance.instance_id)
        instances.append(instance)
    for error in errors:
        log.warning("%s: skipped row %d: %s", path, error.index, error.reason)
    return InstanceLoad(path=str(path), instances=tuple(instances), errors=tuple(errors))
