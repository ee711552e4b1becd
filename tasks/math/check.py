"""The math answer check, run on the host in its own process (`tasks.math.grader` starts it with a deadline).

Reads one JSON object ``{"gold": str, "answer": str, "max_chars": int, "max_answers": int}`` on
stdin and writes ``{"verdict": ..., "detail": ...}`` on stdout. It imports only the standard
library and ``math_verify`` (sympy underneath): a power tower or a huge expression can make sympy
run for minutes or eat memory, which is why it never runs inside the gym's process.

What passes: the answer, as ``math_verify`` parses it (plain numbers, ``1/2``, ``0.5``, LaTeX
with or without ``$``, ``\\boxed{}``, ``x = 5``, thousands separators ``1,000``), is equivalent to
the gold; a percentage (``25%``) also passes for a gold without a percent sign (``25``), as GSM8K
asks. What fails (``wrong_answer``, with the reason in ``detail``):

* an empty answer, or one longer than ``max_chars`` (never parsed);
* several answers: the reply is cut into candidates at newlines, ``;``, sentence ends, the words
  ``or``/``and`` and commas outside brackets that are not thousands separators; candidates that
  parse to different values are a hedge, so a reply that lists guesses never passes on one of them;
* an answer ``math_verify`` cannot parse.

``gold_error`` means the gold itself did not parse (the task's fault, never the candidate's).
"""

from __future__ import annotations

import json
import re
import sys

_SENTENCE = re.compile(r"\.\s+")
_WORDS = re.compile(r"\s+(?:or|and)\s+", re.IGNORECASE)
_THOUSANDS = re.compile(r"\d,\d{3}(?!\d)")
_NUMBERS_APART = re.compile(r"(?<=\d)\s+(?=[-+]?\d)")  # "5 6 7": three answers, not the product LaTeX reads
_WORD = re.compile(r"(?<![\\a-zA-Z])[a-zA-Z]{3,}")  # prose, not a LaTeX command or a variable


def candidates(answer: str) -> list[str]:
    """The separate answers a reply states (see the module docstring); one for a single answer."""
    pieces: list[str] = []
    for line in re.split(r"[\n;]", answer):
        for sentence in _SENTENCE.split(line):
            for part in _WORDS.split(sentence):
                for piece in _top_level_commas(part):
                    pieces += _NUMBERS_APART.split(piece)
    return [piece.strip().strip(".") for piece in pieces if piece.strip().strip(".")]


def _top_level_commas(text: str) -> list[str]:
    """``text`` cut at commas outside brackets, keeping thousands separators (``1,000``) whole."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(0, depth - 1)
        elif char == "," and depth == 0 and not _THOUSANDS.match(text, max(0, i - 1)):
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def parsed(text: str) -> list[object]:
    """What ``math_verify`` reads in ``text``.

    An expression without ``$`` (``3\\sqrt{2}``, ``1+x^2``, ``(1, 2)``) is read as LaTeX math: read as
    prose, only its first number would count. Text with words in it is read as prose, where
    ``math_verify`` finds the answer after phrases like "the answer is".
    """
    from math_verify import parse

    if "$" in text or _WORD.search(text):
        return parse(text, parsing_timeout=None)
    return parse(f"${text}$", parsing_timeout=None) or parse(text, parsing_timeout=None)


def judge(gold: str, answer: str, max_chars: int = 512, max_answers: int = 8) -> tuple[str, str]:
    """``(verdict, detail)`` of ``answer`` against ``gold`` (see the module docstring)."""
    from math_verify import verify

    gold_parsed = parsed(gold)
    if not gold_parsed:
        return "gold_error", f"the gold {gold[:80]!r} does not parse"
    text = answer.strip().replace("{,}", "").replace("\\$", "")  # 1{,}000 is LaTeX's 1,000; \\$ a dollar sign
    if not text:
        return "wrong_answer", "empty answer"
    if len(text) > max_chars:
        return "wrong_answer", f"answer of {len(text)} characters (at most {max_chars} are read)"
    pieces = candidates(text)
    if len(pieces) > max_answers:
        return "wrong_answer", f"{len(pieces)} separate answers (one answer is graded)"
    values = [value for value in (parsed(piece) for piece in pieces) if value]
    for first, other in zip(values, values[1:]):
        if not verify(first, other, timeout_seconds=None):
            return "wrong_answer", f"several different answers: {', '.join(str(v[-1])[:40] for v in values[:4])}"
    whole = parsed(text)
    if not whole:
        return "wrong_answer", f"no mathematical answer found in {text[:80]!r}"
    if verify(gold_parsed, whole, timeout_seconds=None):
        return "passed", ""
    if "%" in text and "%" not in gold:  # "25%" for a GSM8K gold of 25 (the question asked for a percentage)
        bare = parsed(text.replace("\\%", "").replace("%", ""))
        if bare and verify(gold_parsed, bare, timeout_seconds=None):
            return "passed", ""
    return "wrong_answer", f"{str(whole[-1])[:80]} is not {str(gold_parsed[-1])[:80]}"


def main() -> None:
    request = json.loads(sys.stdin.read())
    try:
        verdict, detail = judge(request["gold"], request["answer"], request["max_chars"], request["max_answers"])
    except Exception as exc:  # whatever sympy raises on the candidate's expression: its failure, classified
        verdict, detail = "wrong_answer", f"the checker could not read the answer: {type(exc).__name__}"
    sys.stdout.write(json.dumps({"verdict": verdict, "detail": detail}))


if __name__ == "__main__":
    main()
