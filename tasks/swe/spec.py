"""Specs of the shipped instances: only what we wrote, never third-party code.

A spec names a package and a pinned version on the package registry, the bug
we inject as line-addressed replacements in that version's sdist, the tests we
add, and the test ids. ``python -m gym tasks build-swe`` turns specs into
instances (`tasks.swe.shipped`). One YAML file per instance under
``tasks/swe/specs/``.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tasks.errors import TaskError

SPECS_DIR = Path(__file__).resolve().parent / "specs"


class SpecError(TaskError):
    """A spec file cannot be used (unreadable, invalid, or its injection does not match the sdist)."""


class Injection(BaseModel):
    """Replace the lines of ``old`` starting at ``line`` of ``path`` with ``new`` (the bug)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str = Field(description="file in the sdist, relative to its top directory")
    line: int = Field(ge=1, description="1-based line where ``old`` starts")
    old: str = Field(min_length=1, description="the exact lines found there in the pinned version")
    new: str = Field(description="the lines that replace them")

    def apply(self, text: str) -> str:
        """``text`` with the replacement made; SpecError when ``old`` is not at ``line``."""
        lines = text.splitlines(keepends=True)
        old = self.old.splitlines(keepends=True)
        start = self.line - 1
        found = lines[start : start + len(old)]
        if [line.rstrip("\r\n") for line in found] != [line.rstrip("\r\n") for line in old]:
            raise SpecError(
                f"{self.path}:{self.line}: expected {''.join(old)!r}, found {''.join(found)!r} "
                "(is the pinned version right?)"
            )
        new = self.new.splitlines(keepends=True)
        if new and not new[-1].endswith("\n") and start + len(old) < len(lines):
            new[-1] += "\n"
        return "".join(lines[:start] + new + lines[start + len(old) :])


class TestAddition(BaseModel):
    """Our tests: text appended to a test file of the package (created when missing)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str
    append: str = Field(min_length=1)


class InstanceSpec(BaseModel):
    """One shipped instance, as written in ``tasks/swe/specs/<instance_id>.yaml``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    instance_id: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    repo: str = Field(pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$", description="owner/name upstream")
    package: str = Field(description="distribution name on the package registry")
    version: str = Field(description="pinned version whose sdist is the source")
    problem_statement: str = Field(min_length=1)
    hints_text: str = ""
    injections: tuple[Injection, ...] = Field(min_length=1)
    tests: tuple[TestAddition, ...] = Field(min_length=1)
    fail_to_pass: tuple[str, ...] = Field(min_length=1)
    pass_to_pass: tuple[str, ...] = ()
    install: tuple[str, ...] = Field(("pytest",), description="pip requirements of the environment image")
    test_cmd: str | None = None


def load_spec(path: Path) -> InstanceSpec:
    try:
        data = yaml.safe_load(Path(path).read_text())
        return InstanceSpec.model_validate(data)
    except (OSError, yaml.YAMLError, ValidationError) as err:
        raise SpecError(f"{path}: {err}") from err


def load_specs(directory: Path = SPECS_DIR) -> list[InstanceSpec]:
    """Every ``*.yaml`` spec of ``directory``, sorted by instance id."""
    specs = [load_spec(path) for path in sorted(Path(directory).glob("*.yaml"))]
    ids = [spec.instance_id for spec in specs]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise SpecError(f"{directory}: duplicate instance ids {duplicates}")
    return sorted(specs, key=lambda spec: spec.instance_id)
