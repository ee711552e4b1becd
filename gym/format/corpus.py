"""The generated training corpus of the project's default BPE tokenizer.

The default tokenizer is trained from this corpus alone, not from the repo's
own files: a policy checkpoint is only meaningful with the ids it was trained
on, so those ids must not move when someone edits a README. The text is
generated from fixed word lists and templates with a seeded RNG: same
``CORPUS_VERSION`` and seed, same bytes, on every machine and Python >= 3.11.
Change anything here and bump CORPUS_VERSION (the tokenizer's ids change).

What it covers is what the gym's token streams hold: Python and shell code of
competitive-programming solutions, JSON tool arguments, unified diffs, tool
output, English reasoning text and the Harmony header words.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

CORPUS_VERSION = 2

_WORDS = (
    "the a an of to in and or is are be was it that this for on with as by at from not no all any each "
    "we you they our can will must should may would could have has had do does did make find given "
    "number numbers integer integers array string strings list value values answer output input line lines "
    "first second last next previous test case cases sum maximum minimum count total length size order "
    "sorted sort pair pairs element elements index indices query queries graph tree node nodes edge edges "
    "path paths cost weight distance time memory limit limits example examples sample expected result "
    "function file files directory code run command error errors fix bug check print read write return "
    "loop condition because so then if else when while after before only also still just now here there "
    "need use using try let me think about problem solution approach idea step steps correct wrong fast "
    "slow large small positive negative even odd prime divisor modulo remainder string substring prefix "
    "suffix character characters word words matrix grid row rows column columns cell cells left right up "
    "down start end begin finish between within outside inside over under same different equal greater less"
).split()

_IDENTS = (
    "n m k i j x y z a b c s t u v w l r q p d cnt ans res dp arr nums data grid graph adj dist seen visited "
    "stack queue heap memo left right mid lo hi total best cur prev nxt count value values result output "
    "line lines tokens parts items key keys val idx pos size length width height row col node parent child "
    "edges weights prefix suffix window freq counter mapping table buf path name text words chars digits "
    "config message messages token tokens request response error errors parser render state step batch loss "
    "reward score model policy engine task tasks worker workers timeout budget workspace sandbox container "
    "image command stdout stderr exit_code returncode offset span spans prompt context record records args "
    "kwargs options settings logger handler client server session event events stream buffer payload schema"
).split()

_TYPES = (
    "int",
    "str",
    "float",
    "bool",
    "list[int]",
    "dict[str, int]",
    "tuple[int, ...]",
    "Path",
    "str | None",
    "Sequence[str]",
    "Any",
    "None",
)

_FUNCS = (
    "solve main read_input parse dfs bfs dijkstra union find gcd lcm is_prime sieve build query update "
    "count_pairs max_subarray binary_search check helper compute process run_case"
).split()

_SHELL = (
    "ls -la",
    "cat main.py",
    "python3 main.py < input.txt",
    "python3 solution.py",
    "pytest -q",
    "git diff",
    "git status",
    "head -n 20 input.txt",
    "wc -l *.py",
    "grep -rn def .",
    "echo $?",
    "diff out.txt expected.txt",
    "mkdir -p build && cd build",
    "g++ -O2 -o main main.cpp && ./main < in.txt",
)

_HARMONY = (
    "assistant",
    "analysis",
    "commentary",
    "final",
    "commentary to=functions.python ",
    "commentary to=functions.bash ",
    "commentary to=functions.read_file ",
    "commentary to=functions.write_file ",
    "commentary to=functions.apply_patch ",
    "commentary to=functions.list_dir ",
    "commentary to=functions.submit ",
    "functions.python to=assistant",
    "functions.bash to=assistant",
    "json",
    "# Tools\n\n## functions\n\nnamespace functions {\n",
    "} // namespace functions",
    "# Valid channels: analysis, commentary, final. Channel must be included for every message.",
    "Calls to these tools must go to the commentary channel: 'functions'.",
    "Reasoning: medium",
    "# Instructions\n\n",
    "type python = (_: {\n// The code to run\ncode: string,\n}) => any;\n",
)

_UNICODE = (
    "naïve café",
    "résumé",
    "Größe",
    "日本語のテキスト",
    "中文字符",
    "Привет мир",
    "→ ≤ ≥ ≠ ∑ π",
    "✓ ✗",
    "emoji 🙂 🚀",
)


def _sentence(rng: random.Random) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(5, 16))]
    text = " ".join(words)
    return text[0].upper() + text[1:] + rng.choice((".", ".", ".", "?", ":", ","))


def _prose(rng: random.Random) -> str:
    return " ".join(_sentence(rng) for _ in range(rng.randint(1, 5))) + "\n"


def _expr(rng: random.Random) -> str:
    a, b = rng.choice(_IDENTS), rng.choice(_IDENTS)
    ops = ("+", "-", "*", "//", "%", "<", ">", "==", "!=", "<=", ">=", "and", "or")
    forms = (
        f"{a} {rng.choice(ops)} {b}",
        f"{a}[{b}]",
        f"{a}[{b} - 1]",
        f"len({a})",
        f"max({a}, {b})",
        f"min({a}, {b} + {rng.randint(0, 9)})",
        f"{a} {rng.choice(ops)} {rng.randint(0, 1000)}",
        f"sum({a})",
        f"{a} % {rng.choice(('MOD', '10**9 + 7', '998244353'))}",
        f"{rng.choice(_FUNCS)}({a}, {b})",
    )
    return rng.choice(forms)


def _python(rng: random.Random) -> str:
    lines = [
        rng.choice(
            (
                "import sys",
                "import sys\ninput = sys.stdin.readline",
                "from collections import deque, defaultdict",
                "import heapq",
                "import math",
            )
        )
    ]
    fn = rng.choice(_FUNCS)
    args = ", ".join(rng.sample(_IDENTS, rng.randint(0, 3)))
    lines.append(f"\n\ndef {fn}({args}):")
    indent = "    "
    statements = (
        lambda a: [f"{a} = {_expr(rng)}"],
        lambda a: [
            f"for {rng.choice('ijk')} in range({rng.choice(('n', 'len(arr)', str(rng.randint(1, 100))))}):",
            f"    {a} += {_expr(rng)}",
        ],
        lambda a: [f"if {_expr(rng)}:", f"    return {_expr(rng)}"],
        lambda a: ["n, m = map(int, input().split())"],
        lambda a: [f"{a} = [int(x) for x in input().split()]"],
        lambda a: [f"while {_expr(rng)}:", f"    {a} -= 1"],
        lambda a: [f'print(f"{{{a}}} {{{rng.choice(_IDENTS)}}}")'],
        lambda a: [f"# {_sentence(rng)}"],
        lambda a: [f"{a}.append({_expr(rng)})"],
    )
    for _ in range(rng.randint(3, 12)):
        lines += [indent + line for line in rng.choice(statements)(rng.choice(_IDENTS))]
    lines.append(f"{indent}return {rng.choice(_IDENTS)}")
    lines.append(f'\n\nif __name__ == "__main__":\n    print({fn}())')
    return "\n".join(lines) + "\n"


def _class(rng: random.Random) -> str:
    name = "".join(word.capitalize() for word in rng.sample(_IDENTS, 2)).replace("_", "")
    fields = rng.sample(_IDENTS, 3)
    lines = [f"class {name}:", f'    """{_sentence(rng)}"""', ""]
    lines.append(f"    def __init__(self, {', '.join(f'{f}: {rng.choice(_TYPES)}' for f in fields)}) -> None:")
    lines += [f"        self.{f} = {f}" for f in fields]
    for _ in range(rng.randint(1, 3)):
        arg = rng.choice(_IDENTS)
        lines += [
            "",
            f"    def {rng.choice(_FUNCS)}(self, {arg}: {rng.choice(_TYPES)}) -> {rng.choice(_TYPES)}:",
            f'        """{_sentence(rng)}"""',
            f"        if not isinstance({arg}, {rng.choice(('int', 'str', 'dict', 'list'))}):",
            f'            raise {rng.choice(("ValueError", "TypeError", "KeyError"))}(f"{rng.choice(_WORDS)} {{{arg}!r}}")',
            f"        return self.{rng.choice(fields)}",
        ]
    return "\n".join(lines) + "\n"


def _numbers(rng: random.Random) -> str:
    rows = [
        " ".join(
            str(rng.randint(-(10 ** rng.randint(1, 9)), 10 ** rng.randint(1, 9))) for _ in range(rng.randint(1, 8))
        )
        for _ in range(rng.randint(1, 6))
    ]
    return "\n".join(rows) + "\n"


def _tool_args(rng: random.Random) -> str:
    name = rng.choice(("python", "bash", "read_file", "write_file", "apply_patch", "list_dir", "submit"))
    if name in ("python", "write_file", "submit"):
        args: dict[str, object] = (
            {"code": _python(rng)} if name != "write_file" else {"path": "main.py", "content": _python(rng)}
        )
    elif name == "bash":
        args = {"command": rng.choice(_SHELL)}
    else:
        args = {"path": rng.choice(("main.py", "input.txt", ".", "src/solution.py", "tests/test_main.py"))}
    return json.dumps(args, ensure_ascii=rng.random() < 0.5)


def _diff(rng: random.Random) -> str:
    name = rng.choice(("main.py", "src/solution.py", "lib/utils.py", "app.py"))
    start = rng.randint(1, 200)
    old = [f" {_expr(rng)}" for _ in range(rng.randint(1, 3))]
    return (
        f"--- a/{name}\n+++ b/{name}\n@@ -{start},{len(old) + 1} +{start},{len(old) + 1} @@\n"
        + "\n".join(old)
        + f"\n-    return {_expr(rng)}\n+    return {_expr(rng)}\n"
    )


def _tool_output(rng: random.Random) -> str:
    form = rng.randrange(4)
    if form == 0:
        return f'Traceback (most recent call last):\n  File "main.py", line {rng.randint(1, 99)}, in <module>\n    {_expr(rng)}\n{rng.choice(("IndexError: list index out of range", "ValueError: invalid literal for int() with base 10", "NameError: name is not defined", "TimeoutError"))}\n'
    if form == 1:
        return json.dumps(
            {
                "exit_code": rng.choice((0, 0, 1, 137)),
                "stdout": _numbers(rng),
                "stderr": "",
                "failure": rng.choice(("ok", "nonzero_exit", "timeout")),
            }
        )
    if form == 2:
        return (
            "\n".join(rng.sample(("main.py", "input.txt", "README.md", "tests/", "src/", "setup.py", "out.txt"), 4))
            + "\n"
        )
    return f"$ {rng.choice(_SHELL)}\n{_numbers(rng)}"


_KINDS = (_prose, _python, _python, _class, _numbers, _tool_args, _diff, _tool_output)


def corpus(seed: int = 0, documents: int = 20_000) -> Iterator[str]:
    """Deterministic documents (strings) of code-like text; about 8 MB at the defaults."""
    rng = random.Random(f"gym-corpus-v{CORPUS_VERSION}-{seed}")
    for index in range(documents):
        if index % 50 == 0:
            yield "\n".join(_HARMONY) + "\n" + " ".join(_UNICODE) + "\n"
        yield rng.choice(_KINDS)(rng)
