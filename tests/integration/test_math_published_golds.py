"""Every gold answer of the public MATH (5,000) and GSM8K (1,319) test sets, written as a policy would (bare and in
``\\boxed{}``; GSM8K also with thousands separators), earns 1.0 from the math check, nothing is masked, and the
load-time report lists no gold; each hedge class built from them earns 0. The answers are vendored test data
(tasks/samples/published/MATH_GSM8K.md).

Issue 42, class 4. On the code before the fix, 9,658 of the 10,000 MATH answers (bare and boxed) passed (96.58%):
186 were gold_error (masked as infra_error for every answer: text, base-n, money and unit golds) and 156
wrong_answer (lists of values refused as hedges, ``10,\\!080`` read as two numbers); GSM8K passed whole. Hedges
built the same way on every fifth MATH gold earned 1.0 in three classes (of the 985 it could read): ``{w} = {g}``
34, ``{w} \\equiv {g} \\pmod{7}`` 34, ``\\boxed{w} \\boxed{g}`` 8. Now every answer passes (10,210 MATH answers
with the thousands-separated forms, 2,769 GSM8K) and every hedge of every class earns 0 (then on every fifth
gold, 8,010 hedges; now on every ninth, 556 MATH and 147 GSM8K golds). Measured on the 2-core VM: 2.5 minutes for
the module at load average ~4, 6 beside other suites at 15; 1:45 with hedges on every ninth gold beside the vLLM
modules."""

from __future__ import annotations

import collections
import functools
import gzip
import inspect
import json
import logging
import multiprocessing
import signal
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

from tasks.math.problem import MathTask, gsm8k_gold

PUBLISHED = Path(__file__).resolve().parents[2] / "tasks" / "samples" / "published"
DEADLINE_S = 20  # the check's deadline (MathGraderConfig.timeout_s): a slower answer would be its time_limit
HEDGE_EVERY = 9  # hedges are built on every ninth gold of each set (the whole set: ~9x the time); odd: `Workers`

# Hedge classes: a gold with a wrong answer of its kind (`_kind`: text, a base-n numeral, a list, a constant, an
# expression with unknowns, a name, a relation) beside it, or alone.
CLASSES = {
    "or": "{g} or {w}",
    "or, reversed": "{w} or {g}",
    "list": "{g}, {w}",
    "lines": "{g}\n{w}",
    "relation": "{w} = {g}",
    "congruence": "{w} \\equiv {g} \\pmod{{7}}",
    "boxes": "\\boxed{{{w}}} \\boxed{{{g}}}",
    "wrong alone": "{w}",
}


def golds(name: str) -> list[str]:
    rows = [json.loads(line) for line in gzip.open(PUBLISHED / f"{name}_test_answers.jsonl.gz", "rt")]
    if name == "gsm8k":  # as the loader reads a GSM8K row: the text after ####, separators dropped
        return [gsm8k_gold(f"#### {row['answer']}") for row in rows]
    return [row["answer"] for row in rows]


def honest(gold: str) -> list[str]:
    answers = [gold, f"\\boxed{{{gold}}}"]
    if gold.isdecimal() and int(gold) >= 1000:
        answers.append(f"{int(gold):,}")  # 1,080: how a policy writes a GSM8K number
    return answers


_READ: dict[str, tuple] = {}  # a worker's golds, each read once (`tasks.math.check.read_gold`)


def _judged(answers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``(verdict, detail)`` of each ``(gold, answer)``, as the check process would give it within its deadline:
    ``judge``'s two steps, the gold read once (a check process reads its task's gold once, then the answer; a gold
    is judged against up to ~110 answers here, and a read costs about as much as judging one answer)."""
    from tasks.math.check import judge_read

    logging.disable(logging.WARNING)
    signal.signal(signal.SIGALRM, _deadline)
    verdicts = []
    for gold, answer in answers:
        signal.alarm(DEADLINE_S)
        try:
            read, why = _read(gold)
            verdicts.append(("gold_error", why) if read is None else judge_read(read, answer, *_limits()))
        except TimeoutError:
            verdicts.append(("time_limit", f"past {DEADLINE_S} s"))
        finally:
            signal.alarm(0)
    return verdicts


@functools.cache
def _limits() -> tuple[int, int]:
    """``judge``'s defaults for ``max_chars`` and ``max_answers``, the ones a check is run with here."""
    from tasks.math.check import judge

    return tuple(inspect.signature(judge).parameters[name].default for name in ("max_chars", "max_answers"))


def _read(gold: str) -> tuple:
    from tasks.math.check import read_gold

    if gold not in _READ:
        _READ[gold] = read_gold(gold)
    return _READ[gold]


def _deadline(*_):
    raise TimeoutError


def _kind(gold: str) -> str:
    from tasks.math.reply import is_constant, is_name, is_relation

    read, _ = _read(gold)
    if read is None or read.form != "value":
        return read.form if read else "unread"
    if is_relation(read.value) or is_constant(read.value):
        return "relation" if is_relation(read.value) else "constant"
    return "name" if is_name(read.value) else "expression"


def _hedges(args: tuple[list[str], list[str], int]) -> list[tuple[str, str, str, str]]:
    """``(class, gold, hedge, verdict)`` of the hedges built on gold ``i``: its wrong answer is the next gold of the
    set of its kind (``kinds``) that the check refuses for it (a plausible answer to a sibling question), or of any
    kind when the set holds no other of its kind."""
    from tasks.math.reply import candidates

    golds, kinds, i = args
    gold = golds[i]
    following = [(i + k) % len(golds) for k in range(1, len(golds))]
    for j in [j for j in following if kinds[j] == kinds[i]][:50] + following[:50]:
        if _judged([(gold, golds[j])])[0][0] == "wrong_answer":
            wrong = golds[j]
            break
    else:
        return [("no wrong answer", gold, "", "skipped")]
    hedges = [(name, pattern.format(g=gold, w=wrong)) for name, pattern in CLASSES.items()]
    if kinds[i] == "values":  # a listed gold: one of its values alone
        hedges.append(("one value of a list", candidates(gold)[0]))
    verdicts = _judged([(gold, hedge) for _, hedge in hedges])
    return [(name, gold, hedge, verdict[0]) for (name, hedge), verdict in zip(hedges, verdicts)]


def _honest(gold: str) -> list[tuple[str, str, str]]:
    answers = honest(gold)
    return [(gold, answer, verdict[0]) for answer, verdict in zip(answers, _judged([(gold, a) for a in answers]))]


class Workers:
    """Two forked worker processes, item ``k`` of a map always to worker ``k % 2``: a gold's honest answers, its kind
    and its hedges (gold ``HEDGE_EVERY x k``, of the same parity as ``k``) are judged in the process that read it, so
    each gold is read once in the module (`_read`).

    Executors, not multiprocessing.Pool: a worker that dies breaks its executor (the test fails, BrokenProcessPool),
    where a Pool replaces it and its replacement can wait forever on the task queue's lock, hanging the suite in
    this fixture's teardown (it did once, for ten minutes, in a fresh-clone CI)."""

    def __init__(self) -> None:
        fork = multiprocessing.get_context("fork")
        self.executors = [ProcessPoolExecutor(1, mp_context=fork) for _ in range(2)]

    def map(self, fn, items: list, chunksize: int) -> list:
        shares = [executor.map(fn, items[k::2], chunksize=chunksize) for k, executor in enumerate(self.executors)]
        results = [None] * len(items)
        for k, share in enumerate(shares):
            results[k::2] = list(share)
        return results

    def close(self) -> None:
        for executor in self.executors:
            executor.shutdown()


@pytest.fixture(scope="module")
def pool():
    workers = Workers()
    yield workers
    workers.close()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["math", "gsm8k"])
def test_every_published_gold_earns_one_and_nothing_is_masked(pool, name):
    results = [row for rows in pool.map(_honest, golds(name), chunksize=25) for row in rows]
    verdicts = collections.Counter(verdict for _, _, verdict in results)
    share = verdicts["passed"] / len(results)
    failing = [(gold, answer, verdict) for gold, answer, verdict in results if verdict != "passed"]
    assert share >= 0.99, (share, verdicts, failing[:20])
    assert not verdicts["gold_error"], failing[:20]  # gold_error is masked (infra_error) at grading time
    assert (len(results), share) == ({"math": 10_210, "gsm8k": 2_769}[name], 1.0), (verdicts, failing[:20])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["math", "gsm8k"])
def test_every_hedge_class_built_from_the_published_golds_earns_zero(pool, name):
    every = golds(name)
    kinds = pool.map(_kind, every, chunksize=50)
    built = pool.map(_hedges, [(every, kinds, i) for i in range(0, len(every), HEDGE_EVERY)], chunksize=10)
    rows = [row for rows in built for row in rows]
    by_class: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for hedge_class, _, _, verdict in rows:
        by_class[hedge_class][verdict] += 1
    passing = [(hedge_class, gold, hedge) for hedge_class, gold, hedge, verdict in rows if verdict == "passed"]
    assert not passing, (dict(by_class), passing[:20])
    assert set(by_class) >= set(CLASSES) and "no wrong answer" not in by_class, dict(by_class)
    assert all(counts.keys() == {"wrong_answer"} for counts in by_class.values()), dict(by_class)  # never masked


@pytest.mark.slow
def test_the_load_time_report_over_the_published_sets_lists_no_gold():
    """The load-time reading (`tasks.math.golds`, in check processes as at grading) agrees: it skips no task."""
    from tasks.math.golds import unread_golds

    tasks = [
        MathTask(task_id=f"{name}/{i}", source_format="plain", problem="?", gold=gold)
        for name in ("math", "gsm8k")
        for i, gold in enumerate(golds(name))
    ]
    assert unread_golds(tasks) == []
