"""The tools a policy calls, their schemas, and their execution through the sandbox.

Nine tools, each a pydantic arguments model plus one async handler:
``python``, ``bash``, ``read_file``, ``write_file``, ``apply_patch``, ``list_dir``
and ``submit`` (the default set), and the opt-in ``search`` and ``view`` of
repository work. Their JSON schemas (derived from the arguments models) are
rendered into the developer message by ``gym.format.prompt``. Every call runs in the
episode's workspace: the runner resolves each cwd and path inside the
sandbox's allowlist, and the workspace enforces the call and episode budgets.

Outcomes are data, never exceptions: an unknown tool or arguments that do not
validate give ``tool_error`` (the message names the field), an allowlist
refusal gives ``sandbox_denied``, a runner lost to the engine gives ``infra_error`` (the
episode is then masked) and one the call itself took down gives ``oom``, ``timeout`` or
``workspace_lost`` (scored); arguments the sandbox cannot carry (lone surrogates) give
``tool_error``. Observation text always encodes as UTF-8 (a file name that is not UTF-8
shows with replacement characters) and is deterministic (no timings), so a replay can
compare it byte for byte.

``apply_patch`` runs GNU ``patch`` inside the workspace (it is in the base
image), with ``-p1`` when every file header carries the ``a/``/``b/`` prefixes
of ``git diff`` and ``-p0`` otherwise; target paths are checked on the host
first, so a patch naming an absolute path or ``..`` is ``sandbox_denied``
before anything runs.

``search`` runs ``grep -rnE`` with the searched directory as the call's cwd, so
the runner resolves it inside the allowlist like any cwd (a symlink out is
refused), and grep's recursion never follows a symlink. A file is read with
``read_file`` (the allowlist check again) and grepped from stdin, since grep
follows a symlink named on its command line: searching a file costs up to three
calls of the episode budget, a directory one. Grep runs in the C locale: in the
sandbox's UTF-8 locale a file with one byte that is not UTF-8 counts as binary
and is skipped without a word, so bytes are matched instead (only a file with
NUL bytes is binary; ``ignore_case`` folds ASCII letters only; text shows with
replacement characters). ``view`` slices a ``read_file`` on the host.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gym.format.message import ToolCall
from gym.format.prompt import ToolSpec
from sandbox.errors import InfraError
from sandbox.failure import FailureKind
from sandbox.protocol import MAX_DATA, ExecRequest, ExecResult, FileResult, ListDirResult, ReadFileResult

ToolName = Literal["python", "bash", "read_file", "write_file", "apply_patch", "list_dir", "submit", "search", "view"]
ALL_TOOLS: tuple[ToolName, ...] = (
    "python",
    "bash",
    "read_file",
    "write_file",
    "apply_patch",
    "list_dir",
    "submit",
    "search",
    "view",
)
# The default is part of every environment's prompt that does not list its tools (their schemas are in the
# developer message): a tool added here would change those prompts token for token, so new tools are opt-in.
DEFAULT_TOOLS: tuple[ToolName, ...] = ("python", "bash", "read_file", "write_file", "apply_patch", "list_dir", "submit")
NAMESPACE = "functions"
MAX_SEARCH_RESULTS = 200
SEARCH_LINE_CHARS = 240  # a matching line is cut here: minified code would fill the observation with one match


class ToolsConfig(BaseModel):
    """Which tools an environment offers and how their calls are bounded."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: tuple[ToolName, ...] = Field(DEFAULT_TOOLS, min_length=1, description="Tools offered, in schema order.")
    timeout_s: float = Field(10.0, gt=0, description="Deadline of a python/bash/apply_patch/search call naming none.")
    max_timeout_s: float = Field(60.0, gt=0, description="Largest deadline a call may ask for (larger asks are cut).")
    output_chars: int = Field(8192, ge=256, description="Observation text bound; the middle of longer text is cut.")
    read_bytes: int = Field(
        1 << 20, gt=0, le=MAX_DATA, description="Most bytes read_file, view, search, submit read from a file."
    )

    @model_validator(mode="after")
    def _timeouts(self) -> ToolsConfig:
        if self.timeout_s > self.max_timeout_s:
            raise ValueError(f"timeout_s ({self.timeout_s}) must not exceed max_timeout_s ({self.max_timeout_s})")
        if "submit" not in self.enabled:
            raise ValueError(
                "enabled must include 'submit' (an episode ends with a submitted program or a final answer)"
            )
        return self


class ToolOutcome(BaseModel):
    """What one call did: the observation shown to the model, its failure kind, and a submitted program."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    output: str = Field(description="Observation text (appended to the conversation as the tool's message).")
    failure: FailureKind = Field(description="ok, or why the call did not simply succeed.")
    submitted: str | None = Field(None, description="submit only: the program text handed in.")


class ToolCallRecord(BaseModel):
    """One call as a replay bundle stores it: enough to re-execute it and compare the outcome."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int = Field(ge=0, description="Position among the episode's tool calls.")
    recipient: str = Field(description="Called name as sampled, e.g. 'functions.python'.")
    arguments: str = Field(description="Arguments text exactly as sampled.")
    outcome: ToolOutcome = Field(description="What the call did.")

    def call(self) -> ToolCall:
        namespace, _, name = self.recipient.rpartition(".")
        return ToolCall(namespace=namespace, name=name, arguments=json.loads(self.arguments), raw=self.arguments)


class ToolWorkspace(Protocol):
    """The workspace operations tools use (``sandbox.workspace.Workspace`` implements them)."""

    async def exec(self, request: ExecRequest) -> ExecResult: ...
    async def read_file(self, path: str, max_bytes: int = ...) -> ReadFileResult: ...
    async def write_file(self, path: str, data: bytes, mode: int = ...) -> FileResult: ...
    async def list_dir(self, path: str = ...) -> ListDirResult: ...


# -- arguments -------------------------------------------------------------


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PythonArgs(_Args):
    code: str = Field(description="Python 3 source, run as `python3 -c CODE` in the workspace.")
    stdin: str = Field("", description="Text written to the program's standard input.")
    cwd: str = Field(".", description="Working directory, relative to the workspace root.")
    timeout: float | None = Field(None, gt=0, description="Deadline in seconds (default: the environment's).")


class BashArgs(_Args):
    command: str = Field(description="Shell command, run as `bash -c COMMAND` in the workspace.")
    stdin: str = Field("", description="Text written to the command's standard input.")
    cwd: str = Field(".", description="Working directory, relative to the workspace root.")
    timeout: float | None = Field(None, gt=0, description="Deadline in seconds (default: the environment's).")


class ReadFileArgs(_Args):
    path: str = Field(description="File to read, relative to the workspace root.")


class WriteFileArgs(_Args):
    path: str = Field(description="File to write (parents are created), relative to the workspace root.")
    content: str = Field(description="The whole new content of the file.")


class ApplyPatchArgs(_Args):
    patch: str = Field(description="A unified diff (as `diff -u` or `git diff` write it) to apply in the workspace.")


class RepoPatchArgs(_Args):
    patch: str = Field(description="A unified diff (as `diff -u` or `git diff` write it), paths relative to cwd.")
    cwd: str = Field("repo", description="Directory the diff's paths are relative to (default: the repository).")


class ListDirArgs(_Args):
    path: str = Field(".", description="Directory to list, relative to the workspace root.")


class SearchArgs(_Args):
    pattern: str = Field(min_length=1, description="Regular expression (grep -E syntax) matched against each line.")
    path: str = Field(".", description="File or directory to search (recursively), relative to the workspace root.")
    glob: str | None = Field(None, description="Only files whose name matches this glob, e.g. '*.py' (in directories).")
    max_results: int = Field(50, ge=1, le=MAX_SEARCH_RESULTS, description="Most matching lines shown (at most 200).")
    ignore_case: bool = Field(False, description="Match letters without regard to case.")

    @field_validator("glob")
    @classmethod
    def _file_name(cls, glob: str | None) -> str | None:
        if glob is not None and ("/" in glob or not glob):  # grep matches it to base names: it would match nothing
            raise ValueError("a glob matches file names, e.g. '*.py': no '/' and not empty")
        return glob


class ViewArgs(_Args):
    path: str = Field(description="Text file to show, relative to the workspace root.")
    start_line: int = Field(1, ge=1, description="First line shown (lines count from 1).")
    end_line: int | None = Field(None, ge=1, description="Last line shown, inclusive (default: as many as fit).")

    @model_validator(mode="after")
    def _range(self) -> ViewArgs:
        if self.end_line is not None and self.end_line < self.start_line:
            raise ValueError(f"end_line ({self.end_line}) is before start_line ({self.start_line})")
        return self


class SubmitArgs(_Args):
    path: str | None = Field(None, description="File holding the final program (e.g. 'solution.py').")
    code: str | None = Field(None, description="Or the final program itself.")

    @model_validator(mode="after")
    def _one(self) -> SubmitArgs:
        if (self.path is None) == (self.code is None):
            raise ValueError("give exactly one of 'path' and 'code'")
        return self


class SubmitRepoArgs(_Args):
    """Nothing to give: the repository's state is the answer."""


# -- handlers ----------------------------------------------------------------

Handler = Callable[["Toolbox", ToolWorkspace, Any], Awaitable[ToolOutcome]]


@dataclass(frozen=True)
class Tool:
    """A tool: its name, what the model is told about it, its arguments model and its handler."""

    name: ToolName
    description: str
    args: type[_Args]
    handler: Handler

    def spec(self) -> ToolSpec:
        return ToolSpec(name=self.name, description=self.description, parameters=schema_of(self.args))


def schema_of(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema without pydantic's titles; ``X | None = None`` shows as an optional X."""
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
        variants = prop.get("anyOf")
        if prop.get("default", 0) is None and isinstance(variants, list):
            kept = [v for v in variants if v.get("type") != "null"]
            if len(kept) == 1:
                del prop["anyOf"], prop["default"]
                prop.update(kept[0])
    return schema


def _cut(text: str, limit: int) -> str:
    """Keep the head and tail of a long text (errors tend to be at the end)."""
    if len(text) <= limit:
        return text
    head, tail = limit * 2 // 3, limit // 3
    return f"{text[:head]}\n[... {len(text) - head - tail} characters cut ...]\n{text[-tail:]}"


def _exec_text(result: ExecResult, limit: int) -> str:
    if result.failure in (FailureKind.OK, FailureKind.NONZERO_EXIT):
        parts = [f"[exit code {result.exit_code}]"]
    else:  # the same "[kind] detail" head as every other refusal
        parts = [f"[{result.failure.value}]" + (f" {result.detail}" if result.detail else "")]
    if result.truncated:
        parts.append("[output truncated by the sandbox's output limit]")
    for name, data in (("stdout", result.stdout_text), ("stderr", result.stderr_text)):
        if data:
            parts.append(f"{name}:\n{_cut(data, limit // 2)}")
    return "\n".join(parts)


def _refusal(failure: FailureKind, detail: str) -> ToolOutcome:
    return ToolOutcome(output=f"[{failure.value}] {detail}", failure=failure)


async def _run(
    box: Toolbox,
    ws: ToolWorkspace,
    argv: list[str],
    stdin: str,
    cwd: str,
    timeout: float | None,
) -> ToolOutcome:
    timeout_s = min(timeout or box.config.timeout_s, box.config.max_timeout_s)
    request = ExecRequest(argv=argv, stdin=stdin.encode(), cwd=cwd, timeout_s=timeout_s)
    result = await ws.exec(request)
    return ToolOutcome(output=_exec_text(result, box.config.output_chars), failure=result.failure)


async def _python(box: Toolbox, ws: ToolWorkspace, args: PythonArgs) -> ToolOutcome:
    return await _run(box, ws, ["python3", "-c", args.code], args.stdin, args.cwd, args.timeout)


async def _bash(box: Toolbox, ws: ToolWorkspace, args: BashArgs) -> ToolOutcome:
    return await _run(box, ws, ["bash", "-c", args.command], args.stdin, args.cwd, args.timeout)


async def _read(box: Toolbox, ws: ToolWorkspace, path: str) -> tuple[ReadFileResult, str]:
    result = await ws.read_file(path, max_bytes=box.config.read_bytes)
    return result, result.data.decode("utf-8", errors="replace")


async def _read_file(box: Toolbox, ws: ToolWorkspace, args: ReadFileArgs) -> ToolOutcome:
    result, text = await _read(box, ws, args.path)
    if result.failure not in (FailureKind.OK, FailureKind.OUTPUT_TRUNCATED):
        return _refusal(result.failure, result.detail)
    note = f"\n[file longer than {box.config.read_bytes} bytes: the rest is not shown]" if result.truncated else ""
    return ToolOutcome(output=_cut(text, box.config.output_chars) + note, failure=result.failure)


async def _write_file(box: Toolbox, ws: ToolWorkspace, args: WriteFileArgs) -> ToolOutcome:
    data = args.content.encode()
    result = await ws.write_file(args.path, data)
    if result.failure != FailureKind.OK:
        return _refusal(result.failure, result.detail)
    return ToolOutcome(output=f"wrote {len(data)} bytes to {args.path}", failure=FailureKind.OK)


async def _list_dir(box: Toolbox, ws: ToolWorkspace, args: ListDirArgs) -> ToolOutcome:
    result = await ws.list_dir(args.path)
    if result.failure not in (FailureKind.OK, FailureKind.OUTPUT_TRUNCATED):
        return _refusal(result.failure, result.detail)
    lines = [
        f"{e.name}/" if e.kind == "dir" else f"{e.name} ({e.size} bytes)" if e.kind == "file" else f"{e.name} -> (link)"
        for e in result.entries
    ]
    note = f"\n[{result.detail}]" if result.truncated else ""  # the sandbox's listing bound: how many there are
    text = _cut("\n".join(lines) or "(empty directory)", box.config.output_chars - len(note))
    return ToolOutcome(output=text + note, failure=result.failure)


# One grep -Z record: the file name, NUL, the line number, ':', the line; a name may hold any byte but NUL.
_GREP_MATCH = re.compile(rb"([^\0]*)\0(\d+):([^\n]*)\n")
# How the runner refuses a cwd that is a file or does not exist (sandbox/runner/command.py, run_command).
_NOT_A_DIRECTORY = "is not a directory"
_BYTES_LOCALE = {"LC_ALL": "C"}  # see the module docstring


async def _search(box: Toolbox, ws: ToolWorkspace, args: SearchArgs) -> ToolOutcome:
    flags = ["-nZE", "--binary-files=without-match", "--no-messages"] + (["-i"] if args.ignore_case else [])
    timeout_s = min(box.config.timeout_s, box.config.max_timeout_s)
    include = [f"--include={args.glob}"] if args.glob else []
    argv = ["grep", "-r", *flags, "--exclude-dir=.git", *include, "--", args.pattern, "."]
    result = await ws.exec(ExecRequest(argv=argv, cwd=args.path, timeout_s=timeout_s, env=_BYTES_LOCALE))
    notes, name = [], None
    if result.failure == FailureKind.SANDBOX_DENIED and _NOT_A_DIRECTORY in result.detail:
        read = await ws.read_file(args.path, max_bytes=box.config.read_bytes)
        if read.failure not in (FailureKind.OK, FailureKind.OUTPUT_TRUNCATED):
            return _refusal(read.failure, read.detail)
        if read.truncated:
            notes.append(f"[only the first {box.config.read_bytes} bytes of {args.path} were searched]")
        argv = ["grep", "-H", "--label=", *flags, "--", args.pattern]
        request = ExecRequest(argv=argv, stdin=read.data, cwd=".", timeout_s=timeout_s, env=_BYTES_LOCALE)
        result = await ws.exec(request)
        name = args.path
    if result.failure not in (FailureKind.OK, FailureKind.NONZERO_EXIT, FailureKind.OUTPUT_TRUNCATED):
        return _refusal(result.failure, result.detail)  # grep cut at the output bound: its matches so far are shown
    if result.exit_code == 2 and result.stderr:  # with --no-messages only a bad pattern or option writes here
        return _refusal(FailureKind.TOOL_ERROR, _cut(result.stderr_text.strip(), box.config.output_chars))
    if result.exit_code == 2:
        notes.append("[some files could not be read and were not searched]")
    elif result.stderr:  # a warning about the pattern (newer greps warn of stray backslashes): worth showing
        notes.append(_cut(result.stderr_text.strip(), SEARCH_LINE_CHARS))
    matches = sorted(
        (
            name or posixpath.normpath(posixpath.join(args.path, found.decode(errors="replace"))),
            int(number),
            text.decode(errors="replace"),
        )
        for found, number, text in _GREP_MATCH.findall(result.stdout)
    )
    if not matches:
        where = f" in files matching {args.glob!r}" if args.glob else ""
        return ToolOutcome(
            output="\n".join([f"no matches for {args.pattern!r} in {args.path}{where}", *notes]), failure=FailureKind.OK
        )
    return ToolOutcome(
        output=_match_lines(matches, args.max_results, result.truncated, box.config.output_chars, notes),
        failure=FailureKind.OUTPUT_TRUNCATED if result.truncated else FailureKind.OK,
    )


def _match_lines(
    matches: list[tuple[str, int, str]], max_results: int, incomplete: bool, limit: int, notes: list[str]
) -> str:
    """``path:line:text`` lines, as many as ``max_results`` and the observation bound allow, then what was cut."""
    lines: list[str] = []
    room = limit - 200 - sum(len(n) + 1 for n in notes)  # left for the closing lines
    for path, number, text in matches[:max_results]:
        if len(text) > SEARCH_LINE_CHARS:
            text = f"{text[:SEARCH_LINE_CHARS]} [... {len(text) - SEARCH_LINE_CHARS} characters cut]"
        line = f"{path}:{number}:{text}"
        if len(line) + 1 > room:
            break
        lines.append(line)
        room -= len(line) + 1
    cut = len(matches) - len(lines)
    if incomplete:  # grep's output passed the sandbox's output bound: the count is a floor
        lines.append(
            f"[{cut} more matches not shown, and maybe more not found: the search output passed the "
            "sandbox's output limit; narrow the pattern, path or glob]"
        )
    elif cut:
        why = f"max_results {max_results}" if len(lines) == max_results else "output limit"
        lines.append(f"[{cut} more matches not shown ({why}); narrow the pattern, path or glob]")
    return "\n".join(lines + notes)


def _view_lines(text: str, truncated: bool) -> list[str]:
    """The file's lines as editors number them (a final newline ends the last line, it starts none)."""
    lines = text.split("\n")
    if lines[-1] == "" or (truncated and len(lines) > 1):  # a read cut short ends in a part of a line: left out
        lines.pop()
    return lines


async def _view(box: Toolbox, ws: ToolWorkspace, args: ViewArgs) -> ToolOutcome:
    result, text = await _read(box, ws, args.path)
    if result.failure not in (FailureKind.OK, FailureKind.OUTPUT_TRUNCATED):
        return _refusal(result.failure, result.detail)
    lines = _view_lines(text, result.truncated)
    count = f"{len(lines)}+" if result.truncated else f"{len(lines)}"
    notes = (
        [f"[the file is longer than {box.config.read_bytes} bytes: only lines 1-{len(lines)} can be viewed]"]
        if result.truncated
        else []
    )
    if not lines and args.start_line == 1:
        return ToolOutcome(output=f"[{args.path}: empty file, 0 lines]", failure=FailureKind.OK)
    if args.start_line > len(lines):
        past = f"start_line {args.start_line} is past the end: {args.path} has {count} lines"
        return _refusal(FailureKind.TOOL_ERROR, "\n".join([past, *notes]))
    end = min(args.end_line or len(lines), len(lines))
    clip, room, shown = max(box.config.output_chars // 2, 80), box.config.output_chars - 300, []
    for number in range(args.start_line, end + 1):
        line = lines[number - 1]
        if len(line) > clip:
            line = f"{line[:clip]} [... {len(line) - clip} characters cut]"
        line = f"{number:>6}\t{line}"
        if shown and len(line) + 1 > room:
            break
        shown.append(line)
        room -= len(line) + 1
    last = args.start_line + len(shown) - 1
    if last < end:
        notes.append(f"[lines {last + 1}-{end} not shown (output limit): view again from start_line {last + 1}]")
    out = "\n".join([f"[{args.path}: lines {args.start_line}-{last} of {count}]", *shown, *notes])
    return ToolOutcome(output=_cut(out, box.config.output_chars), failure=FailureKind.OK)


_PATCH_HEADER = re.compile(r"^(?:---|\+\+\+) (\S+)", re.MULTILINE)


def patch_paths(patch: str) -> tuple[list[str], int]:
    """The file paths a unified diff names (``/dev/null`` left out) and the strip level ``patch`` needs."""
    names = _PATCH_HEADER.findall(patch)
    prefixed = bool(names) and all(n == "/dev/null" or n.startswith(("a/", "b/")) for n in names)
    strip = 1 if prefixed else 0
    paths = [n.split("/", strip)[-1] if strip else n for n in names if n != "/dev/null"]
    return paths, strip


async def _apply_patch(box: Toolbox, ws: ToolWorkspace, args: ApplyPatchArgs | RepoPatchArgs) -> ToolOutcome:
    paths, strip = patch_paths(args.patch)
    if not paths:
        return _refusal(FailureKind.TOOL_ERROR, "no '--- FILE' / '+++ FILE' headers: not a unified diff")
    for path in paths:
        if path.startswith("/") or ".." in posixpath.normpath(path).split("/"):
            return _refusal(FailureKind.SANDBOX_DENIED, f"patch names {path!r}: paths must stay inside the workspace")
    argv = ["patch", f"-p{strip}", "--batch", "--forward", "--no-backup-if-mismatch", "--reject-file=-"]
    return await _run(box, ws, argv, args.patch, getattr(args, "cwd", "."), None)


async def _submit(box: Toolbox, ws: ToolWorkspace, args: SubmitArgs) -> ToolOutcome:
    if args.code is not None:
        program = args.code
    else:
        result, program = await _read(box, ws, args.path or "")
        if result.truncated:
            return _refusal(
                FailureKind.TOOL_ERROR, f"cannot submit {args.path}: larger than {box.config.read_bytes} bytes"
            )
        if result.failure != FailureKind.OK:
            return _refusal(result.failure, f"cannot submit {args.path}: {result.detail}")
    return ToolOutcome(output=f"submitted {len(program.encode())} bytes", failure=FailureKind.OK, submitted=program)


async def _submit_repo(box: Toolbox, ws: ToolWorkspace, args: SubmitRepoArgs) -> ToolOutcome:
    return ToolOutcome(output="submitted the repository", failure=FailureKind.OK, submitted="")


TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        Tool(
            "python",
            "Run Python 3 code in the workspace; returns the exit status, stdout and stderr.",
            PythonArgs,
            _python,
        ),
        Tool(
            "bash", "Run a bash command in the workspace; returns the exit status, stdout and stderr.", BashArgs, _bash
        ),
        Tool("read_file", "Read a text file of the workspace.", ReadFileArgs, _read_file),
        Tool("write_file", "Create or overwrite a file of the workspace.", WriteFileArgs, _write_file),
        Tool("apply_patch", "Apply a unified diff to files of the workspace.", ApplyPatchArgs, _apply_patch),
        Tool("list_dir", "List a directory of the workspace.", ListDirArgs, _list_dir),
        Tool("submit", "Submit the final program and end the episode. Give its path or its code.", SubmitArgs, _submit),
        Tool(
            "search",
            "Search the workspace's files for lines matching a regular expression; returns "
            "path:line:text lines (.git and binary files skipped).",
            SearchArgs,
            _search,
        ),
        Tool("view", "Show a range of lines of a text file of the workspace, with line numbers.", ViewArgs, _view),
    )
}


# Repository tasks (SWE): a patch applies inside the repository by default, and submit hands in the repository.
REPOSITORY_TOOLS: dict[str, Tool] = {
    **TOOLS,
    "apply_patch": Tool(
        "apply_patch", "Apply a unified diff to files of the repository (or of cwd).", RepoPatchArgs, _apply_patch
    ),
    "submit": Tool(
        "submit", "Submit your changes to the repository and end the episode.", SubmitRepoArgs, _submit_repo
    ),
}
ToolboxKind = Literal["program", "repository", "answer"]
# What a task answered on the final channel (math) is offered: calculators only; no submit (nothing but the
# final message is an answer) and no files (nothing in the workspace is read back).
ANSWER_TOOLS = ("python", "bash")


class Toolbox:
    """The enabled tools of one environment: their specs for the prompt, and ``call`` to run one.

    ``kind``: ``program`` (a task answered by a program: ``submit`` takes it) or ``repository`` (an SWE
    task: ``apply_patch`` works in ``repo`` by default and ``submit`` takes nothing, the repository's
    diff is the answer) or ``answer`` (a math task: only ``ANSWER_TOOLS`` of the enabled ones, the answer is
    the final-channel message).
    """

    def __init__(self, config: ToolsConfig | None = None, kind: ToolboxKind = "program") -> None:
        self.config = config or ToolsConfig()
        self.kind = kind
        table = REPOSITORY_TOOLS if kind == "repository" else TOOLS
        enabled = [name for name in self.config.enabled if kind != "answer" or name in ANSWER_TOOLS]
        self.tools = {name: table[name] for name in enabled}

    def specs(self) -> list[ToolSpec]:
        return [tool.spec() for tool in self.tools.values()]

    async def call(self, ws: ToolWorkspace, call: ToolCall) -> ToolOutcome:
        """Run one parsed call; every problem comes back as an outcome, never as an exception."""
        tool = self.tools.get(call.name) if call.namespace == NAMESPACE else None
        if tool is None:
            known = ", ".join(f"{NAMESPACE}.{name}" for name in self.tools)
            return _refusal(FailureKind.TOOL_ERROR, f"unknown tool {call.recipient!r}; available: {known}")
        try:
            args = tool.args.model_validate(call.arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}" for e in exc.errors()
            )
            return _refusal(FailureKind.TOOL_ERROR, f"bad arguments for {call.recipient}: {problems}")
        try:
            outcome = await tool.handler(self, ws, args)
        except InfraError as exc:  # the engine failed under the call: masked, as a lost engine is
            return _refusal(FailureKind.INFRA_ERROR, str(exc))
        except Exception as exc:  # arguments the sandbox cannot carry (lone surrogates, ...): the call's fault
            return _refusal(
                FailureKind.TOOL_ERROR, f"{call.recipient} could not run: {type(exc).__name__}: {exc}"[:500]
            )
        return outcome.model_copy(update={"output": printable(outcome.output)})


def printable(text: str) -> str:
    """``text`` with lone surrogates (a file name that is not UTF-8, a sampled escape) replaced by ``?``: every
    observation must encode, or the tokenizer would raise past the episode."""
    return text.encode("utf-8", errors="replace").decode("utf-8")
