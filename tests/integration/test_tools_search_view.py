"""``search`` and ``view`` in a real hardened workspace: real grep, the runner's allowlist, symlinks out."""

from __future__ import annotations

import pytest

from gym.format.message import ToolCall
from gym.tools import DEFAULT_TOOLS, Toolbox, ToolsConfig
from sandbox.failure import FailureKind
from tests.sandbox_support import in_workspace, sh

pytestmark = pytest.mark.docker

OK, DENIED, ERROR = FailureKind.OK, FailureKind.SANDBOX_DENIED, FailureKind.TOOL_ERROR
FILES = {
    "src/a.py": b"def Foo():\n    return 'foo'\n",
    "src/b.py": b"import a\n\ndef bar():\n    return a.Foo()\n",
    "src/notes.md": b"def in markdown\n",
    "src/many.txt": b"".join(b"hit %d\n" % i for i in range(1, 31)),
    "src/blob.bin": b"def \x00 binary\n",
    "src/latin1.txt": b"# caf\xe9 marker\n",
    ".git/config": b"def in git\n",
    "view.txt": b"".join(b"line %d\n" % i for i in range(1, 21)) + b"caf\xe9 tail",
}
LINKS = "ln -s /etc link_out && ln -s /etc/passwd src/passwd_link && ln -s a.py src/in_link && ln -s ../.. src/up"


def call(name: str, **arguments) -> ToolCall:
    return ToolCall(namespace="functions", name=name, arguments=arguments, raw="{}")


def run_calls(calls: list[ToolCall]):
    box = Toolbox(ToolsConfig(enabled=(*DEFAULT_TOOLS, "search", "view"), timeout_s=5))

    async def go(ws):
        assert (await ws.put_files(FILES)).failure == OK
        assert (await ws.exec(sh(LINKS))).exit_code == 0
        return [await box.call(ws, c) for c in calls]

    return in_workspace(go)


def test_search_finds_sorted_matches_and_reports_what_it_cut_or_could_not_do():
    outcomes = run_calls(
        [
            call("search", pattern=r"^def \w+", glob="*.py"),
            call("search", pattern="^DEF", path="src", ignore_case=True),
            call("search", pattern="^DEF", path="src"),
            call("search", pattern="hit [0-9]+$", max_results=5),
            call("search", pattern="(unclosed"),
            call("search", pattern="return", path="src/a.py"),
            call("search", pattern="return", path="src/in_link"),
            call("search", pattern="x", path="missing.py"),
            call("search", pattern="-rf"),
            call("search", pattern="caf.* marker$"),
        ]
    )
    assert [o.failure for o in outcomes] == [OK, OK, OK, OK, ERROR, OK, OK, ERROR, OK, OK]
    # .git, binary files and other names than the glob are skipped; matches by path then line number
    assert outcomes[0].output == "src/a.py:1:def Foo():\nsrc/b.py:3:def bar():"
    assert outcomes[1].output == "src/a.py:1:def Foo():\nsrc/b.py:3:def bar():\nsrc/notes.md:1:def in markdown"
    assert outcomes[2].output == "no matches for '^DEF' in src"
    assert (
        outcomes[3].output
        == "\n".join(f"src/many.txt:{i}:hit {i}" for i in range(1, 6))
        + "\n[25 more matches not shown (max_results 5); narrow the pattern, path or glob]"
    )
    assert outcomes[4].output.startswith("[tool_error] grep: ") and "Unmatched ( or \\(" in outcomes[4].output
    assert outcomes[5].output == "src/a.py:2:    return 'foo'"
    assert outcomes[6].output == "src/in_link:2:    return 'foo'"
    assert "No such file" in outcomes[7].output
    assert outcomes[8].output == "no matches for '-rf' in ."  # a pattern starting with '-' is not an option
    assert outcomes[9].output == "src/latin1.txt:1:# caf\ufffd marker"  # not UTF-8, still searched


def test_search_never_leaves_the_allowlist():
    outcomes = run_calls(
        [
            call("search", pattern="root", path="/etc"),
            call("search", pattern="root", path="../etc"),
            call("search", pattern="root", path="link_out"),
            call("search", pattern="root", path="src/passwd_link"),
            call("search", pattern="root", path="src/up"),
            call("search", pattern="root:x:0"),  # recursion from the root does not follow the links out
        ]
    )
    assert [o.failure for o in outcomes] == [DENIED] * 5 + [OK]
    assert all(o.output.startswith("[sandbox_denied]") and "outside the allowlist" in o.output for o in outcomes[:5])
    assert outcomes[5].output == "no matches for 'root:x:0' in ."


def test_view_shows_ranges_and_refuses_what_it_cannot_show():
    outcomes = run_calls(
        [
            call("view", path="view.txt", start_line=2, end_line=4),
            call("view", path="view.txt", start_line=19),
            call("view", path="view.txt", start_line=22),
            call("view", path="missing.py"),
            call("view", path="/etc/passwd"),
            call("view", path="src/passwd_link"),
            call("view", path="src/in_link", end_line=1),
            call("view", path="src"),
            call("view", path="src/a.py\ud800"),
        ]
    )
    assert [o.failure for o in outcomes] == [OK, OK, ERROR, ERROR, DENIED, DENIED, OK, ERROR, ERROR]
    assert outcomes[0].output == "[view.txt: lines 2-4 of 21]\n     2\tline 2\n     3\tline 3\n     4\tline 4"
    assert (
        outcomes[1].output == "[view.txt: lines 19-21 of 21]\n    19\tline 19\n    20\tline 20\n    21\tcaf\ufffd tail"
    )
    assert outcomes[2].output == "[tool_error] start_line 22 is past the end: view.txt has 21 lines"
    assert "No such file" in outcomes[3].output
    assert outcomes[6].output == "[src/in_link: lines 1-1 of 2]\n     1\tdef Foo():"
    assert "Is a directory" in outcomes[7].output
    assert "surrogates not allowed" in outcomes[8].output
