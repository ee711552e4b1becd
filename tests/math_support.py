"""Math answers for the check's tests: correct answers nested deep (tests/unit/test_math_nesting.py,
tests/integration/test_math_check_bounds.py); scripts standing in for the check (tests/unit/test_attacks_math.py,
tests/unit/test_math_forkserver.py)."""

from __future__ import annotations

from pathlib import Path


def fake_check(tmp_path: Path, body: str) -> Path:
    """A script standing in for the math check (`tasks.math.grader.CHECK`): it reads its request, then runs
    ``body`` (``os``, ``signal``, ``sys`` and ``time`` imported)."""
    script = tmp_path / "check.py"
    script.write_text(f"import os, signal, sys, time\nsys.stdin.read()\n{body}\n")
    return script


def nested(shape: str, depth: int) -> tuple[str, str]:
    """``(gold, a correct answer nested depth deep)`` of one shape."""
    return {
        "parentheses": ("5", "(" * depth + "5" + ")" * depth),
        "braces": ("5", "{" * depth + "5" + "}" * depth),
        "square roots": (f"2^{{\\frac{{1}}{{2^{{{depth}}}}}}}", "\\sqrt{" * depth + "2" + "}" * depth),
        "fractions": (f"\\frac{{1}}{{2^{{{depth}}}}}", "\\frac{" * depth + "1" + "}{2}" * depth),
        "sums": (str(depth + 1), "(1+" * depth + "1" + ")" * depth),
        "sized": ("5", "\\left(" * depth + "5" + "\\right)" * depth),
    }[shape]


# Each shape at the depths that fit in the default max_chars (512): fractions take 10 characters a level.
DEEP = [
    *(("parentheses", d) for d in (20, 40, 80, 100)),
    *(("braces", d) for d in (20, 40, 80, 100)),
    *(("square roots", d) for d in (20, 40, 72)),
    *(("fractions", d) for d in (20, 40, 50)),
    *(("sums", d) for d in (20, 40, 63)),  # 64 numbers: MAX_NUMBERS
    *(("sized", d) for d in (20, 36)),
]
