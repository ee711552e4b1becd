"""Generated programs (references, wrong and degenerate programs) run in a host interpreter, for the generator's
tests: the project's own programs only, never a candidate's."""

from __future__ import annotations

import json
import re
import subprocess
import sys

# Runs each (source, inputs) job once per input inside one isolated interpreter (`python3 -I`): a fresh module
# namespace, stdin and stdout per run; an exception ends that run's stdout with `<Type: message>`. One process
# for many runs: an interpreter start costs ~0.1 s of CPU here, and 350 of them made a test file take 35 s on a
# busy 2-core machine.
_HARNESS = """
import contextlib, io, json, sys
results = []
for source, inputs in json.load(sys.stdin):
    code = compile(source, "solution.py", "exec")
    outputs = []
    for text in inputs:
        sys.stdin, out = io.StringIO(text), io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                exec(code, {"__name__": "__main__"})
        except Exception as err:
            out.write(f"<{type(err).__name__}: {err}>")
        outputs.append(out.getvalue())
    results.append(outputs)
sys.stdout.write(json.dumps(results))
"""
_CRASH = re.compile(r"<\w+: [^\n]*>\Z")


def outputs(jobs: list[tuple[str, list[str]]]) -> list[list[str]]:
    """Each job's stdout on each of its inputs, run by one host `python3 -I` subprocess."""
    proc = subprocess.run(
        [sys.executable, "-I", "-c", _HARNESS],
        input=json.dumps(jobs),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(proc.stdout)


def crashed(output: str) -> bool:
    """Whether a run's stdout ends with the harness's exception marker."""
    return bool(_CRASH.search(output))
