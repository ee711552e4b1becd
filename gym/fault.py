"""Why a command failed, for a person: one line with the fix, and an exit code per class of fault.

`python -m gym` runs every command under `describe`: an exception of a known class (the layers' error
trees, the host faults below) prints ``gym: error: <what went wrong> — <the fix>`` on stderr and exits
with its class's `ExitCode` (docs/cli.md); ``-v`` prints the traceback as well. Anything else is a bug
and keeps its traceback. A trio exception group whose every leaf is known reads as its first leaf.

Project classes are named by dotted path and matched only when their module is already imported (an
exception of a class whose module was never loaded cannot exist), so describing a failure never
imports a layer, torch or the trainer, that the command did not load.
"""

from __future__ import annotations

import enum
import errno
import gzip
import os
import re
import select
import sys
import zlib
from dataclasses import dataclass

from pydantic import ValidationError


class ExitCode(enum.IntEnum):
    """Exit status of `python -m gym COMMAND`, one per class of fault (the table in docs/cli.md)."""

    OK = 0
    ERROR = 1  # a project error no class below covers: a run that stopped, a check that failed
    USAGE = 2  # arguments or a config file: missing, a typo, an invalid field, an unknown name
    INFRA = 3  # the Docker engine (or the policy server) does not answer or failed a call
    IMAGE = 4  # a sandbox image is missing or cannot be built
    INPUT = 5  # a data file (tasks, solutions, bundle, run directory) cannot be read
    HOST = 6  # this machine refused a resource: a port in use, a path not writable, a full disk
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as a shell reports it)
    OUTPUT_CLOSED = 141  # stdout's reader went away (`show B | head`): 128 + SIGPIPE, as `cat` reports it; silent


@dataclass(frozen=True)
class Fault:
    code: ExitCode
    problem: str
    fix: str | None  # None: the problem's own text already ends with the fix

    def line(self) -> str:
        return f"gym: error: {self.problem}" + (f" — {self.fix}" if self.fix else "")


class CommandError(Exception):
    """A command's own failure, raised with the fix and the exit code it knows best."""

    def __init__(self, problem: str, fix: str, code: ExitCode = ExitCode.ERROR) -> None:
        super().__init__(problem)
        self.fix, self.code = fix, code


# (module, class) -> exit code and fix; the first match wins, so subclasses stand before their bases.
KNOWN: tuple[tuple[str, str, ExitCode, str | None], ...] = (
    (
        "sandbox.errors",
        "EngineUnreachable",
        ExitCode.INFRA,
        "start dockerd: `bash bin/setup` (or point DOCKER_HOST at a running engine)",
    ),
    ("sandbox.errors", "ImageMissing", ExitCode.IMAGE, None),  # its message names the command that builds it
    ("images.inputs", "ImageBuildError", ExitCode.IMAGE, "fix the cause named, then `python -m gym images build`"),
    (
        "sandbox.errors",
        "SandboxConfigError",
        ExitCode.USAGE,
        "fix the file or the field named (every key: sandbox/config.py)",
    ),
    (
        "sandbox.errors",
        "InfraError",
        ExitCode.INFRA,
        "check the engine with `docker info` (`bash bin/setup` restarts dockerd); `python -m gym gc` removes leftovers",
    ),
    ("sandbox.killtest.catalog", "UnknownAttack", ExitCode.USAGE, None),  # names `killtest --list`
    (
        "gym.service.app",
        "SandboxServeConfigError",
        ExitCode.USAGE,
        "fix the file or the field named (every key: gym/service/app.py, sandbox/config.py)",
    ),
    (
        "policies.serve_config",
        "ServeConfigError",
        ExitCode.USAGE,
        "fix the file or the field named (every key: policies/serve_config.py)",
    ),
    ("trainer.errors", "ConfigError", ExitCode.USAGE, "fix the file or the field named (every key: trainer/config.py)"),
    (
        "gym.commands.grade",
        "GradeConfigError",
        ExitCode.USAGE,
        "fix the file or the field named (a family's keys: its settings model, docs/tasks.md)",
    ),
    ("gym.registry", "RegistryError", ExitCode.USAGE, None),  # an environment name: its message ends with the fix
    (
        "gym.environment",
        "EnvironmentConfigError",
        ExitCode.USAGE,
        "fix the file or the field named (every key: gym/environment.py)",
    ),
    (
        "gym.overrides",
        "OverrideError",
        ExitCode.USAGE,
        "fix the --set item: KEY=VALUE, KEY a dotted path of the config",
    ),
    (
        "gym.format.template",
        "ChatFormatError",
        ExitCode.USAGE,
        "set environment.chat_format to the format the model speaks (auto, harmony, qwen, llama3, deepseek) and "
        "tokenizer to hf:DIR holding its chat template (docs/chat_formats.md)",
    ),
    (
        "gym.format.tokenizer",
        "TokenizerError",
        ExitCode.USAGE,
        "a spec is bpe, bpe:PATH, hf:DIR or o200k_harmony; `python -m gym tokenizer train` builds the default bpe",
    ),
    (
        "kernels.backend",
        "KernelBackendError",
        ExitCode.USAGE,
        "choose a backend this machine can run (kernels/backend.py)",
    ),
    (
        "gym.policy_client",
        "PolicySpecError",
        ExitCode.USAGE,
        "--policy takes scripted:reference, scripted:empty, scripted:wrong, http://HOST:PORT or checkpoint:DIR",
    ),
    (
        "policies.sampling",
        "EngineError",
        ExitCode.INFRA,
        "start the policy server (`python -m gym serve CONFIG`) or fix the engine URL",
    ),
    ("tasks.errors", "TaskError", ExitCode.INPUT, "check the file named (formats: tasks/loader.py)"),
    (
        "gym.bundle",
        "BundleError",
        ExitCode.INPUT,
        "pass a replay bundle written by rollout or train (RUN/bundles/*.json)",
    ),
    ("gym.plot", "PlotError", ExitCode.INPUT, "pass a training run directory (it holds metrics.jsonl)"),
    (
        "trainer.errors",
        "CheckpointError",
        ExitCode.INPUT,
        "use an earlier checkpoint (RUN/checkpoints/step_N), or the model and settings that wrote this one",
    ),
    ("trainer.errors", "TrainerError", ExitCode.ERROR, "see the run directory's summary.json and the log above"),
)

# errno -> exit code and fix of an OSError this machine raised (the file or address is in its text).
HOST_FAULTS: dict[int, tuple[ExitCode, str]] = {
    errno.EADDRINUSE: (ExitCode.HOST, "stop what listens there, or pick another port (--port; 0 picks a free one)"),
    errno.EADDRNOTAVAIL: (ExitCode.HOST, "bind an address of this machine (--host 127.0.0.1)"),
    errno.EACCES: (ExitCode.HOST, "use a path this user may write (or fix its permissions)"),
    errno.EPERM: (ExitCode.HOST, "use a path this user may write (or fix its permissions)"),
    errno.EROFS: (ExitCode.HOST, "use a path on a writable filesystem"),
    errno.ENOTDIR: (ExitCode.HOST, "a file stands where a directory is needed: use another path"),
    errno.EEXIST: (ExitCode.HOST, "a file stands where a directory is needed: use another path"),
    errno.ENOSPC: (ExitCode.HOST, "free disk space, or write elsewhere"),
    errno.EDQUOT: (ExitCode.HOST, "free disk space, or write elsewhere"),
    errno.ENOENT: (ExitCode.INPUT, "check the path"),
    errno.EISDIR: (ExitCode.INPUT, "pass a file, not a directory"),
}


def describe(exc: BaseException) -> Fault | None:
    """The fault ``exc`` stands for, or None when it is a bug (some leaf of a group is unknown)."""
    faults = [_leaf(leaf) for leaf in leaves(exc)]
    if not faults or None in faults:
        return None
    return faults[0]


def leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]


def one_line(text: str) -> str:
    """Multi-line messages (one line per invalid field, YAML marks) joined as one: ``a:\\n  b\\nc`` -> ``a: b; c``."""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    joined = "".join(line + (" " if line.endswith(":") else "; ") for line in lines)
    return re.sub(r"[;\s]+$", "", joined)


def _leaf(exc: BaseException) -> Fault | None:
    if isinstance(exc, CommandError):
        return Fault(exc.code, one_line(exc), exc.fix)
    for module, name, code, fix in KNOWN:
        cls = getattr(sys.modules.get(module), name, None)
        if cls is not None and isinstance(exc, cls):
            return Fault(code, one_line(exc), fix)
    if isinstance(exc, BrokenPipeError) and stdout_closed():  # a socket's broken pipe is not this; it falls through
        return Fault(ExitCode.OUTPUT_CLOSED, "stdout closed", None)
    if isinstance(exc, KeyboardInterrupt):
        return Fault(ExitCode.INTERRUPTED, "interrupted", "`python -m gym gc` removes any containers left behind")
    if isinstance(exc, ValidationError):  # a model validated outside a loader that names its file
        from sandbox.config_file import describe_errors  # torch- and Docker-free, as every loader uses

        return Fault(ExitCode.USAGE, one_line(describe_errors(exc, f"invalid {exc.title}")), "fix the field named")
    if isinstance(exc, (UnicodeDecodeError, gzip.BadGzipFile, zlib.error)):
        return Fault(
            ExitCode.INPUT, f"a file cannot be read: {one_line(exc)}", "pass a UTF-8 text file (a real .gz if so named)"
        )
    if isinstance(exc, OSError) and exc.errno in HOST_FAULTS:
        code, fix = HOST_FAULTS[exc.errno]
        problem = f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror or str(exc)
        return Fault(code, one_line(problem), fix)
    return None


def stdout_closed() -> bool:
    """True when stdout is a pipe whose reader has gone (`| head` that stopped reading)."""
    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poll.poll(0))
    except (AttributeError, OSError, ValueError):  # stdout replaced (a test's capture) or already closed
        return False


def silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush of what is still buffered for a reader that
    went away raises no second BrokenPipeError ("Exception ignored ...") on the way out."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (AttributeError, OSError, ValueError):
        pass
