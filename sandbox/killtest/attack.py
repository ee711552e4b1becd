"""What one kill-test attack is: data plus small programs, and the outcome that means "contained".

An attack runs a ``Program`` in a fresh workspace (optionally followed by
file-tool ``ToolStep``s, a program run ``after`` them in the same workspace,
and a program in a ``fresh`` workspace acquired once the first is gone). Every
program has a fixed set of ``expected`` observations; anything else is an
escape. Where the observation comes from is part of the data:

- ``report``: the program's own last ``KILLTEST {json}`` line (``observed``);
  when the program was killed before it could report (OOM, deadline) the
  runner's classified failure stands in for it;
- ``failure``: the runner's ``FailureKind``, classified from kernel counters,
  never from text the program printed;
- ``processes``: what the host sees in the container right after the call
  (``swept`` when nothing but the init and the runner is left).

Host-side checks (``sandbox.killtest.hostcheck``) run after every attack
whatever the observation says.
"""

from __future__ import annotations

import io
import tarfile
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sandbox.failure import FailureKind

Group = Literal["resources", "lifetime", "network", "filesystem", "kernel", "information", "persistence"]
GROUPS: tuple[Group, ...] = ("resources", "lifetime", "network", "filesystem", "kernel", "information", "persistence")
# A hardening switch whose removal alone must turn the attack into an escape (see configs/killtest_weak_*.yaml).
Weakening = Literal["cpu", "network", "pids", "rootfs", "seccomp"]
ERROR = "error"  # a program reports this when it could not even set up its attack


class _Data(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Program(_Data):
    """One program run as one exec call (as the sandbox user, like any tool call)."""

    lang: Literal["python", "bash"] = Field(description="python programs get sandbox/killtest/prelude.py prepended")
    source: str = Field(min_length=1, description="the program text")
    expected: tuple[str, ...] = Field(min_length=1, description="observations that mean the sandbox held")
    observe: Literal["report", "failure", "processes"] = Field("report", description="where the observation comes from")
    timeout_s: float = Field(8.0, gt=0, le=60, description="deadline of the call")
    env: dict[str, str] = Field(
        default_factory=dict,
        description="added to the environment; values are str.format templates over the suite facts "
        "(gateway_host, gateway_port, canary_name, attack)",
    )


class ToolStep(_Data):
    """One file-tool (or exec cwd) call the host makes against the workspace: the tool-level attacks."""

    op: Literal["exec_cwd", "read_file", "write_file", "list_dir", "put_archive", "get_archive"]
    path: str = Field(description="path given to the tool (cwd for exec_cwd, destination for put_archive)")
    member: str = Field("", description="put_archive: name of the single tar member")
    member_type: Literal["file", "symlink", "hardlink"] = Field("file", description="put_archive: the member's type")
    linkname: str = Field("", description="put_archive: target of a symlink/hardlink member")
    expect: tuple[FailureKind, ...] = Field(
        (FailureKind.SANDBOX_DENIED,), min_length=1, description="classified results that mean the tool held"
    )

    def archive(self) -> bytes:
        """put_archive: a tar holding the one member this step describes."""
        info = tarfile.TarInfo(self.member)
        data = b"killtest\n" if self.member_type == "file" else b""
        info.size = len(data)
        if self.member_type != "file":
            info.type = tarfile.SYMTYPE if self.member_type == "symlink" else tarfile.LNKTYPE
            info.linkname = self.linkname
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            tar.addfile(info, io.BytesIO(data) if data else None)
        return buffer.getvalue()

    @property
    def label(self) -> str:
        return f"{self.op} {self.path}" + (f" [{self.member_type} {self.member}]" if self.member else "")


class Attack(_Data):
    """One catalog entry."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$", max_length=40)
    group: Group
    goal: str = Field(min_length=1, description="one line: what the attack tries")
    program: Program | None = Field(None, description="run first, in workspace A")
    steps: tuple[ToolStep, ...] = Field((), description="tool calls after the program, in workspace A")
    after: Program | None = Field(None, description="run in workspace A after the steps (e.g. to look for effects)")
    fresh: Program | None = Field(None, description="run in a fresh workspace acquired after A was removed")
    neighbour: Literal["none", "plant", "probe"] = Field(
        "none",
        description="plant: the host writes a canary file into a second workspace first; "
        "probe: a second workspace's exec latency is measured while the program runs, the attacker frozen and "
        "running in turn",
    )
    accounting: Literal["none", "cpu"] = Field(
        "none",
        description="cpu: the host reads the container's CPU time over the whole attack and checks it against "
        "the container's CPU limit (a container without one fails)",
    )
    targets: tuple[str, ...] = Field((), description="absolute paths the attack tries to create or change")
    breaks_without: frozenset[Weakening] = Field(
        frozenset(), description="weakenings under which this attack must be reported as an escape"
    )

    @model_validator(mode="after")
    def _does_something(self) -> Attack:
        if self.program is None and not self.steps:
            raise ValueError(f"attack {self.name!r} has neither a program nor tool steps")
        if self.neighbour == "probe" and self.program is None:
            raise ValueError(f"attack {self.name!r}: a neighbour probe needs a program to run against")
        return self

    @property
    def programs(self) -> tuple[Program, ...]:
        return tuple(p for p in (self.program, self.after, self.fresh) if p is not None)

    @property
    def expected(self) -> str:
        """The expected outcome in words, for the table."""
        parts = ["|".join(p.expected) for p in self.programs]
        if self.steps:
            parts.insert(
                1 if self.program else 0, "tools " + "|".join(sorted({k.value for s in self.steps for k in s.expect}))
            )
        return "; ".join(parts)
