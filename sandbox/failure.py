"""The one failure taxonomy, used by the sandbox, the graders, the gym and the trainer."""

from __future__ import annotations

import enum


class FailureKind(str, enum.Enum):
    """Why a tool call (or an episode) did not simply succeed.

    Classified from cgroup counters, exit status and filesystem counters, never
    from text the sandboxed program printed.
    """

    OK = "ok"
    NONZERO_EXIT = "nonzero_exit"
    TIMEOUT = "timeout"
    OOM = "oom"
    PIDS_LIMIT = "pids_limit"
    DISK_FULL = "disk_full"
    OUTPUT_TRUNCATED = "output_truncated"
    SANDBOX_DENIED = "sandbox_denied"  # policy refused: cwd/path outside the allowlist
    PARSE_ERROR = "parse_error"  # model output not a valid Harmony turn or tool call
    TOOL_ERROR = "tool_error"  # unknown tool, bad arguments
    # The call's own processes took the workspace down (its runner or container died while the engine
    # stayed healthy): the candidate's failure, scored, never masked (see sandbox.workspace.Workspace._blame).
    WORKSPACE_LOST = "workspace_lost"
    # Grading found the candidate's code reaching into the test run (tasks.swe.harness, tasks.swe.tamper): the
    # episode's grade; reward 0, scored, never masked.
    TAMPERED = "tampered"
    INFRA_ERROR = "infra_error"  # the engine's, daemon's or host's failure: never a reward of 0, always masked


class Verdict(str, enum.Enum):
    """Per-test verdict of a grader. ``infra_error`` never counts as a fail."""

    PASSED = "passed"
    WRONG_ANSWER = "wrong_answer"
    RUNTIME_ERROR = "runtime_error"
    TIME_LIMIT = "time_limit"
    MEMORY_LIMIT = "memory_limit"
    COMPILE_ERROR = "compile_error"
    TAMPERED = "tampered"  # the candidate's code reached into the test run: a fail, never masked
    INFRA_ERROR = "infra_error"
