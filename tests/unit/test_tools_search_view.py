"""``search`` and ``view`` without Docker: arguments, the grep command line, observation text, opt-in.

The fake answers grep from a script of results; real grep runs in tests/integration/test_tools_search_view.py.
"""

from __future__ import annotations

import pytest

from gym.format.prompt import developer_message
from gym.tools import ALL_TOOLS, DEFAULT_TOOLS, Toolbox, ToolsConfig
from sandbox.failure import FailureKind
from sandbox.protocol import ExecRequest, ExecResult, ReadFileRequest, ReadFileResult
from tests.fakes import MemoryWorkspace, call, run

BOTH = ToolsConfig(enabled=(*DEFAULT_TOOLS, "search", "view"))


class GrepWorkspace(MemoryWorkspace):
    """A cwd naming a file (or nothing) is refused as the runner refuses it; other execs answer from ``results``."""

    def __init__(self, *results: ExecResult) -> None:
        super().__init__()
        self.results = list(results)

    async def exec(self, request: ExecRequest) -> ExecResult:
        full = self._path(request.cwd)
        if full is not None and full != "/workspace" and not any(f.startswith(full + "/") for f in self.files):
            self.requests.append(request)
            return ExecResult(failure=FailureKind.SANDBOX_DENIED, detail=f"cwd {full!r} is not a directory")
        refused = await super().exec(request)
        return refused if refused.failure != FailureKind.OK else self.results.pop(0)


def grep_output(*records: tuple[str, int, str], exit_code: int = 0, stderr: bytes = b"", truncated: bool = False):
    stdout = b"".join(f"{name}\0{n}:{text}\n".encode() for name, n, text in records)
    return ExecResult(
        exit_code=exit_code,
        stdout=stdout,
        stderr=stderr,
        truncated=truncated,  # the runner's classification: a cut output is output_truncated
        failure=FailureKind.OUTPUT_TRUNCATED
        if truncated
        else FailureKind.OK
        if exit_code == 0
        else FailureKind.NONZERO_EXIT,
    )


def search(ws: GrepWorkspace, config: ToolsConfig = BOTH, **arguments):
    return run(Toolbox(config), ws, call("search", **arguments))


def view(ws: MemoryWorkspace, config: ToolsConfig = BOTH, **arguments):
    return run(Toolbox(config), ws, call("view", **arguments))


def test_the_default_tools_stay_the_seven_and_search_and_view_are_opt_in():
    assert Toolbox().config.enabled == DEFAULT_TOOLS == ALL_TOOLS[:7]
    assert set(ALL_TOOLS) - set(DEFAULT_TOOLS) == {"search", "view"}
    default = developer_message("Solve it.", Toolbox().specs()).content
    assert "type search" not in default and "type view" not in default
    unknown = run(Toolbox(), GrepWorkspace(), call("search", pattern="x"))
    assert unknown.failure == FailureKind.TOOL_ERROR and "unknown tool 'functions.search'" in unknown.output
    text = developer_message("Solve it.", Toolbox(BOTH).specs()).content
    assert "type search = (_: {" in text and "type view = (_: {" in text
    assert "max_results?: number, // default: 50" in text and "end_line?: number," in text


@pytest.mark.parametrize(
    ("tool", "arguments", "field"),
    [
        ("search", {}, "pattern"),
        ("search", {"pattern": ""}, "pattern"),
        ("search", {"pattern": "x", "max_results": 0}, "max_results"),
        ("search", {"pattern": "x", "max_results": 201}, "max_results"),
        ("search", {"pattern": "x", "glob": "src/*.py"}, "glob"),
        ("search", {"pattern": "x", "ignore_case": "sometimes"}, "ignore_case"),
        ("search", {"pattern": "x", "regex": True}, "regex"),
        ("view", {}, "path"),
        ("view", {"path": "a.py", "start_line": 0}, "start_line"),
        ("view", {"path": "a.py", "start_line": 5, "end_line": 4}, "end_line (4) is before start_line (5)"),
    ],
)
def test_bad_arguments_are_tool_errors_naming_the_field(tool, arguments, field):
    ws = GrepWorkspace()
    outcome = run(Toolbox(BOTH), ws, call(tool, **arguments))
    assert outcome.failure == FailureKind.TOOL_ERROR and field in outcome.output, outcome
    assert ws.requests == []


def test_a_directory_search_is_one_grep_with_the_directory_as_cwd_and_user_text_as_plain_arguments():
    ws = GrepWorkspace(grep_output(("./b.py", 3, "-rf x"), ("./a.py", 10, "-rf y"), ("./a.py", 2, "-rf z")))
    ws.files["/workspace/src/a.py"] = b""
    outcome = search(ws, pattern="-rf", path="src", glob="*.py", ignore_case=True)
    (request,) = ws.requests
    assert request.cwd == "src" and request.stdin == b"" and request.env == {"LC_ALL": "C"}
    assert request.argv[0] == "grep" and "bash" not in request.argv
    assert request.argv[-3:] == ["--", "-rf", "."]  # the pattern after "--": never read as an option
    assert {"-r", "-i", "--exclude-dir=.git", "--include=*.py", "--binary-files=without-match"} <= set(request.argv)
    assert outcome.failure == FailureKind.OK
    assert outcome.output == "src/a.py:2:-rf z\nsrc/a.py:10:-rf y\nsrc/b.py:3:-rf x"  # by path, then line number
    plain = GrepWorkspace(grep_output())
    search(plain, pattern="-i")
    assert "-i" not in plain.requests[0].argv[:-3] and "--include" not in " ".join(plain.requests[0].argv)


def test_names_with_colons_and_newlines_long_lines_and_the_cut_past_max_results():
    records = [("./we:ird\nname.txt", 1, "hit"), ("./long.py", 1, "x" * 500)]
    records += [(f"./f{i:03}.py", i, "hit") for i in range(1, 8)]
    outcome = search(GrepWorkspace(grep_output(*records)), pattern="hit|x", max_results=3)
    lines = outcome.output.split("\n")
    assert lines[0] == "f001.py:1:hit" and lines[2] == "f003.py:3:hit"
    assert lines[-1] == "[6 more matches not shown (max_results 3); narrow the pattern, path or glob]"
    full = search(GrepWorkspace(grep_output(*records)), pattern="hit|x", max_results=200).output
    assert f"long.py:1:{'x' * 240} [... 260 characters cut]" in full
    assert "we:ird\nname.txt:1:hit" in full and "more matches" not in full


def test_the_observation_bound_cuts_whole_match_lines_and_says_so():
    records = [(f"./f{i:03}.py", 1, "y" * 100) for i in range(200)]
    config = BOTH.model_copy(update={"output_chars": 2048})
    outcome = search(GrepWorkspace(grep_output(*records)), config, pattern="y", max_results=200)
    lines = outcome.output.split("\n")
    assert len(outcome.output) <= 2048 and all(line.endswith("y" * 100) for line in lines[:-1])
    cut = 200 - len(lines) + 1
    assert lines[-1] == f"[{cut} more matches not shown (output limit); narrow the pattern, path or glob]"
    cut_by_sandbox = search(GrepWorkspace(grep_output(*records[:2], truncated=True)), pattern="y")
    assert cut_by_sandbox.failure == FailureKind.OUTPUT_TRUNCATED and cut_by_sandbox.output.startswith("f000.py:1:")
    assert cut_by_sandbox.output.endswith(
        "[0 more matches not shown, and maybe more not found: the search output "
        "passed the sandbox's output limit; narrow the pattern, path or glob]"
    )


def test_no_match_is_ok_a_bad_pattern_is_a_tool_error_and_warnings_are_shown():
    none = search(GrepWorkspace(grep_output(exit_code=1)), pattern="nothing", glob="*.md")
    assert none.failure == FailureKind.OK and none.output == "no matches for 'nothing' in . in files matching '*.md'"
    bad = search(GrepWorkspace(grep_output(exit_code=2, stderr=b"grep: Unmatched ( or \\(\n")), pattern="(")
    assert bad.failure == FailureKind.TOOL_ERROR and bad.output == "[tool_error] grep: Unmatched ( or \\("
    unreadable = search(GrepWorkspace(grep_output(("./a", 1, "x"), exit_code=2)), pattern="x")
    assert unreadable.failure == FailureKind.OK
    assert unreadable.output == "a:1:x\n[some files could not be read and were not searched]"
    warned = search(
        GrepWorkspace(grep_output(("./a", 1, "d1"), stderr=b"grep: warning: stray \\ before d\n")), pattern="\\d"
    )
    assert warned.output == "a:1:d1\ngrep: warning: stray \\ before d"


def test_refusals_of_the_sandbox_come_back_as_their_kind():
    outside = search(GrepWorkspace(), pattern="root", path="/etc")
    assert outside.failure == FailureKind.SANDBOX_DENIED and outside.output.startswith("[sandbox_denied]")
    late = search(GrepWorkspace(ExecResult(failure=FailureKind.TIMEOUT, detail="deadline of 10s")), pattern="x")
    assert late.failure == FailureKind.TIMEOUT and late.output == "[timeout] deadline of 10s"


def test_a_file_is_read_through_the_allowlist_and_grepped_from_stdin():
    ws = GrepWorkspace(grep_output(("", 2, "b = 2")))
    ws.files["/workspace/src/a.py"] = b"a = 1\nb = 2\n"
    outcome = search(ws, pattern="b", path="src/a.py")
    assert outcome.output == "src/a.py:2:b = 2" and outcome.failure == FailureKind.OK
    first, grep = ws.requests
    assert first.cwd == "src/a.py" and grep.stdin == b"a = 1\nb = 2\n" and grep.argv[-2:] == ["--", "b"]
    assert "--label=" in grep.argv and "-r" not in grep.argv
    missing = search(GrepWorkspace(), pattern="b", path="nope.py")
    assert missing.failure == FailureKind.TOOL_ERROR and "No such file" in missing.output
    cut = GrepWorkspace(grep_output(exit_code=1))
    cut.files["/workspace/big.txt"] = b"z" * 300
    outcome = search(cut, BOTH.model_copy(update={"read_bytes": 100}), pattern="b", path="big.txt")
    assert outcome.output == "no matches for 'b' in big.txt\n[only the first 100 bytes of big.txt were searched]"


def numbered(*lines: tuple[int, str]) -> str:
    return "\n".join(f"{n:>6}\t{text}" for n, text in lines)


def test_view_shows_a_numbered_range_with_a_header():
    ws = MemoryWorkspace()
    ws.files["/workspace/a.py"] = "".join(f"line {i}\n" for i in range(1, 13)).encode()
    assert view(ws, path="a.py", start_line=3, end_line=5).output == "[a.py: lines 3-5 of 12]\n" + numbered(
        (3, "line 3"), (4, "line 4"), (5, "line 5")
    )
    assert view(ws, path="a.py", start_line=11, end_line=99).output == "[a.py: lines 11-12 of 12]\n" + numbered(
        (11, "line 11"), (12, "line 12")
    )
    assert view(ws, path="a.py").output.count("\n") == 12
    past = view(ws, path="a.py", start_line=13)
    assert (
        past.failure == FailureKind.TOOL_ERROR
        and past.output == "[tool_error] start_line 13 is past the end: a.py has 12 lines"
    )


def test_view_of_odd_files_missing_files_and_refused_paths():
    ws = MemoryWorkspace()
    ws.files["/workspace/latin1.txt"] = b"caf\xe9\r\nno final newline"
    ws.files["/workspace/empty.txt"] = b""
    assert view(ws, path="latin1.txt").output == "[latin1.txt: lines 1-2 of 2]\n" + numbered(
        (1, "caf\ufffd\r"), (2, "no final newline")
    )
    assert view(ws, path="empty.txt").output == "[empty.txt: empty file, 0 lines]"
    assert view(ws, path="empty.txt", start_line=2).failure == FailureKind.TOOL_ERROR
    missing = view(ws, path="missing.py")
    assert missing.failure == FailureKind.TOOL_ERROR and "No such file" in missing.output
    assert view(ws, path="../etc/passwd").failure == FailureKind.SANDBOX_DENIED


def test_view_stays_inside_the_observation_and_read_bounds():
    ws = MemoryWorkspace()
    ws.files["/workspace/big.py"] = "".join(f"{'v' * 90} {i}\n" for i in range(1, 301)).encode()
    ws.files["/workspace/wide.py"] = b"w" * 5000 + b"\nshort\n"
    config = BOTH.model_copy(update={"output_chars": 2048})
    outcome = view(ws, config, path="big.py", start_line=10)
    lines = outcome.output.split("\n")
    assert len(outcome.output) <= 2048 and lines[0].startswith("[big.py: lines 10-") and lines[0].endswith(" of 300]")
    last = int(lines[-2].split("\t")[0])
    assert lines[-1] == f"[lines {last + 1}-300 not shown (output limit): view again from start_line {last + 1}]"
    wide = view(ws, config, path="wide.py").output
    assert len(wide) <= 2048 and f"{'w' * 1024} [... 3976 characters cut]" in wide and wide.endswith("short")
    cut = view(ws, config.model_copy(update={"read_bytes": 950}), path="big.py", start_line=9)
    assert (
        cut.output
        == "[big.py: lines 9-10 of 10+]\n"
        + numbered((9, f"{'v' * 90} 9"), (10, f"{'v' * 90} 10"))
        + "\n[the file is longer than 950 bytes: only lines 1-10 can be viewed]"
    )
    assert (
        view(ws, config.model_copy(update={"read_bytes": 950}), path="big.py", start_line=11).output
        == "[tool_error] start_line 11 is past the end: big.py has 10+ lines\n"
        "[the file is longer than 950 bytes: only lines 1-10 can be viewed]"
    )


def test_lone_surrogates_are_tool_errors_not_exceptions():
    class Serializing(GrepWorkspace):  # the real workspace sends requests as JSON, which refuses them
        async def exec(self, request: ExecRequest) -> ExecResult:
            request.model_dump_json()
            return await super().exec(request)

        async def read_file(self, path: str, max_bytes: int = 1 << 20) -> ReadFileResult:
            ReadFileRequest(path=path, max_bytes=max_bytes).model_dump_json()
            return await super().read_file(path, max_bytes)

    for tool, arguments in (
        ("search", {"pattern": "\ud800"}),
        ("search", {"pattern": "x", "glob": "*\udcff"}),
        ("search", {"pattern": "x", "path": "\udc80"}),
        ("view", {"path": "a\ud83d"}),
    ):
        outcome = run(Toolbox(BOTH), Serializing(grep_output()), call(tool, **arguments))
        assert outcome.failure == FailureKind.TOOL_ERROR, outcome
        assert "surrogates not allowed" in outcome.output or "unicode" in outcome.output, outcome
        outcome.output.encode("utf-8")
