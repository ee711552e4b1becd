"""The math check's fork server (`tasks.math.forkserver`) under attack: every check is a child forked from one
process that imported math-verify once, so nothing a check does may reach the server or a later check, the
server's death is the host's failure (masked, and the next check starts a new server), and no child outlives the
check that started it. Honest controls beside each: the next honest answer passes.

The checks that misbehave here are scripts standing in for the check (as in test_attacks_math.py): the server runs
the script it is asked to run, by path, in the forked child, exactly as it runs ``tasks/math/check.py``."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

import tasks.math.grader as math_grader
from sandbox.failure import Verdict
from tasks.math.grader import FORK_SERVER, MathGrader, MathGraderConfig, grade_sync
from tasks.math.problem import MathTask
from tests.math_support import fake_check
from tests.process_support import process_state

TASK = MathTask(task_id="t", source_format="plain", problem="What is 6 times 7?", gold="42")
REPO = Path(__file__).resolve().parents[2]


def _honest_pair(grader: MathGrader) -> None:
    right, wrong = grade_sync(grader, TASK, "42"), grade_sync(grader, TASK, "41")
    assert right.passed and not right.infra_error, right.detail
    assert wrong.tests[0].verdict == Verdict.WRONG_ANSWER and not wrong.infra_error, wrong.detail


def _gone(pid: int, within_s: float = 10.0) -> bool:
    """Whether ``pid`` ended (gone, or a zombie nobody reaped yet) within ``within_s``."""
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        if process_state(pid) in ("gone", "Z", "X"):
            return True
        time.sleep(0.05)
    return False


def _after_the_gold(tmp_path: Path, rest: str) -> tuple[Path, Path]:
    """``(a check that records its pid in a file, reads the gold and goes on with rest, that file)``."""
    pid_file = tmp_path / "pid"
    record = f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\nprint('gold read', file=sys.stderr, flush=True)"
    return fake_check(tmp_path, f"{record}\n{rest}"), pid_file


def test_checks_are_children_of_one_server_and_cost_no_import_each():
    grader = MathGrader()
    _honest_pair(grader)
    server = FORK_SERVER.pid
    assert server is not None
    started = time.monotonic()
    for answer in ("42", "6 \\cdot 7", "\\boxed{42}", "41", "42 or 41"):
        grade_sync(grader, TASK, answer)
    # five checks in well under one interpreter's sympy import (~0.9 s of CPU, ~1.6 s idle on the 2-core VM each)
    assert FORK_SERVER.pid == server and time.monotonic() - started < 5.0


def test_a_check_that_poisons_the_imported_checker_leaves_later_checks_untouched(tmp_path, monkeypatch):
    """A child rewrites the checker it inherited (every later answer would pass) and exits: the server never
    ran it, so the next child starts from the untouched imports and a wrong answer stays wrong."""
    script = tmp_path / "check.py"
    script.write_text("import tasks.math.check as c\nc.judge_read = lambda *a: ('passed', '')\nc.main()\n")
    with monkeypatch.context() as patch:
        patch.setattr(math_grader, "CHECK", script)
        poisoned = grade_sync(MathGrader(), TASK, "41")
    assert poisoned.passed  # the poison worked inside its own child
    _honest_pair(MathGrader())


def test_a_check_that_sleeps_before_the_gold_is_masked_at_the_start_bound(tmp_path, monkeypatch):
    server_before = FORK_SERVER.pid
    with monkeypatch.context() as patch:
        patch.setattr(math_grader, "CHECK", fake_check(tmp_path, "time.sleep(60)"))
        result = grade_sync(MathGrader(MathGraderConfig(start_timeout_s=1)), TASK, "42")
    assert result.infra_error and "ran past 1 s before reading the gold" in result.detail, result.detail
    assert result.wall_s < 20
    assert server_before is None or FORK_SERVER.pid == server_before  # the child was killed, not the server
    _honest_pair(MathGrader())


def test_a_server_killed_between_checks_is_started_again(tmp_path):
    grader = MathGrader()
    _honest_pair(grader)
    first = FORK_SERVER.pid
    os.kill(first, signal.SIGKILL)
    assert _gone(first)
    _honest_pair(grader)
    assert FORK_SERVER.pid not in (None, first)


@pytest.mark.parametrize("strict", [False, True])
def test_a_server_killed_mid_check_masks_that_check_and_takes_its_child_along(tmp_path, monkeypatch, strict):
    """The host's failure, after the gold was read: masked (infra_error), never the answer's time_limit or 0, and
    never an exception out of grade, also where trio groups a nursery's errors strictly (its default from 0.25);
    the child dies with its server (its death signal), and the next check runs on a new server."""
    script, pid_file = _after_the_gold(tmp_path, "time.sleep(60)")
    grader = MathGrader(MathGraderConfig(timeout_s=30, backstop_factor=2))

    def kill_the_server() -> None:
        os.kill(FORK_SERVER.pid, signal.SIGKILL)

    with monkeypatch.context() as patch:
        patch.setattr(math_grader, "CHECK", script)
        result, child = trio.run(_meanwhile, grader, pid_file, kill_the_server, strict_exception_groups=strict)
    assert result.infra_error and result.tests[0].verdict == Verdict.INFRA_ERROR, result.detail
    assert "math check server" in result.detail and result.wall_s < 20
    assert _gone(child)
    _honest_pair(grader)


async def _meanwhile(grader: MathGrader, pid_file: Path, action) -> tuple:
    """Grade "42" with the check that records its pid in ``pid_file``; once it runs, call ``action``. Returns the
    result and the check's pid."""
    results = []

    async def grade() -> None:
        results.append(await grader.grade(TASK, "42"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(grade)
        with trio.fail_after(30):
            while not pid_file.exists() or not pid_file.read_text():
                await trio.sleep(0.05)
        action()
    return results[0], int(pid_file.read_text())


def test_a_cancelled_check_leaves_no_child_running(tmp_path, monkeypatch):
    """The caller gives up (its own deadline) while the check computes: the child is killed before grade returns
    control, so no check burns a CPU for nobody."""
    script, pid_file = _after_the_gold(tmp_path, "while True:\n    pass")
    grader = MathGrader(MathGraderConfig(timeout_s=60, backstop_factor=2))

    async def give_up():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(grader.grade, TASK, "42")
            with trio.fail_after(30):
                while not pid_file.exists() or not pid_file.read_text():
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
        return int(pid_file.read_text())

    with monkeypatch.context() as patch:
        patch.setattr(math_grader, "CHECK", script)
        child = trio.run(give_up)
    assert _gone(child, within_s=5)
    _honest_pair(grader)


MALFORMED = {
    "a file where the connection goes": lambda pipe: [pipe, pipe, pipe, pipe],
    "three descriptors": lambda pipe: [pipe, pipe, pipe],
    "five descriptors": lambda pipe: [pipe] * 5,
    "no descriptors": lambda pipe: [],
}


@pytest.mark.parametrize("kind", list(MALFORMED))
def test_a_check_the_server_cannot_take_is_dropped_alone(tmp_path, monkeypatch, kind):
    """A message on the control socket the server cannot turn into a check (here forged by the test; in use, a
    connection or pidfd the host refuses) is dropped with its descriptors: the server lives on, and a check in
    flight meanwhile keeps its own verdict (before, one bad message ended the server and masked every check)."""
    script, pid_file = _after_the_gold(tmp_path, 'time.sleep(1)\nprint(\'{"verdict": "passed", "detail": ""}\')')
    grader = MathGrader()
    _honest_pair(grader)
    server = FORK_SERVER.pid
    read, write = os.pipe()

    def forge() -> None:
        header = struct.pack("<q", 1 << 30) + str(script).encode()
        socket.send_fds(FORK_SERVER._started(), [header], MALFORMED[kind](read))

    try:
        with monkeypatch.context() as patch:
            patch.setattr(math_grader, "CHECK", script)
            result, _ = trio.run(_meanwhile, grader, pid_file, forge)
    finally:
        os.close(read)
        os.close(write)
    assert result.passed and not result.infra_error, result.detail
    assert FORK_SERVER.pid == server
    _honest_pair(grader)


def test_a_forked_check_starts_with_no_more_address_space_than_a_fresh_one(tmp_path, monkeypatch):
    """The server holds only what the check needs (not the grader's trio, 14 MB): a memory_mb that fits a fresh
    interpreter's check fits a forked one, so the two modes give an answer the same room."""
    body = (
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "import tasks.math.check as c\n"
        "c.read_gold('1/2')\n"
        "size = [l for l in open('/proc/self/status') if l.startswith('VmSize')][0].split()[1]\n"
        'print(\'{"verdict": "wrong_answer", "detail": "\' + size + \'"}\')\n'
    )
    with monkeypatch.context() as patch:
        patch.setattr(
            math_grader, "CHECK", fake_check(tmp_path, "print('gold read', file=sys.stderr, flush=True)\n" + body)
        )
        forked = grade_sync(MathGrader(), TASK, "42")
        fresh = grade_sync(MathGrader(MathGraderConfig(fork_server=False)), TASK, "42")
    assert not forked.infra_error and not fresh.infra_error, (forked.detail, fresh.detail)
    assert int(forked.detail) <= int(fresh.detail) + 4096, (forked.detail, fresh.detail)  # kB


def test_a_real_answer_that_hangs_sympy_is_killed_and_the_server_lives_on():
    server_before = (grade_sync(MathGrader(), TASK, "42"), FORK_SERVER.pid)[1]
    result = grade_sync(MathGrader(MathGraderConfig(timeout_s=1, backstop_factor=40)), TASK, "9^{9^{9^{9}}}")
    assert result.tests[0].verdict == Verdict.TIME_LIMIT and not result.infra_error, result.detail
    assert FORK_SERVER.pid == server_before
    _honest_pair(MathGrader())


def test_a_check_that_eats_memory_is_the_answers_memory_limit_and_the_server_lives_on(tmp_path, monkeypatch):
    body = "print('gold read', file=sys.stderr, flush=True)\nblocks = []\nwhile True:\n    blocks.append(bytearray(1 << 24))\n"
    server_before = (grade_sync(MathGrader(), TASK, "42"), FORK_SERVER.pid)[1]
    with monkeypatch.context() as patch:
        patch.setattr(math_grader, "CHECK", fake_check(tmp_path, body))
        result = grade_sync(MathGrader(MathGraderConfig(memory_mb=512)), TASK, "42")
    assert result.tests[0].verdict == Verdict.MEMORY_LIMIT and not result.infra_error, result.detail
    assert FORK_SERVER.pid == server_before
    _honest_pair(MathGrader())


ENDINGS = {
    "returns": "",
    "is killed": "time.sleep(60)\n",
    # a forked copy of the process (a worker pool's fork) outlives it: the copy dropped its copies of the
    # server's sockets at the fork, so the server still ends with the process that started it
    "returns, a forked copy living on": "if os.fork() == 0:\n    time.sleep(30)\n    os._exit(0)\n",
}


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_the_server_ends_with_the_process_that_started_it(ending):
    """No server outlives its grader's process, whether that process exits or is killed (the control socket's
    close ends it; the server's own children die with it)."""
    program = (
        "import os, sys, time\n"
        "from tasks.math.grader import FORK_SERVER, MathGrader, grade_sync\n"
        "from tasks.math.problem import MathTask\n"
        "task = MathTask(task_id='t', source_format='plain', problem='?', gold='42')\n"
        "assert grade_sync(MathGrader(), task, '42').passed\n"
        "print(FORK_SERVER.pid, flush=True)\n" + ENDINGS[ending]
    )
    process = subprocess.Popen(
        [sys.executable, "-c", program],
        cwd=REPO,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        start_new_session=True,
    )
    try:
        server = int(process.stdout.readline())
        if ending == "is killed":
            process.kill()
        process.wait(timeout=60)
        assert _gone(server)
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the forked copy, if any


def test_checks_through_the_server_and_through_fresh_interpreters_agree():
    answers = ["42", "41", "\\frac{84}{2}", "42 or 43", "\\text{forty-two}", "4" * 600]
    forked = [grade_sync(MathGrader(), TASK, answer) for answer in answers]
    fresh = [grade_sync(MathGrader(MathGraderConfig(fork_server=False)), TASK, answer) for answer in answers]
    assert [(r.passed, r.infra_error, r.tests[0].verdict, r.detail) for r in forked] == [
        (r.passed, r.infra_error, r.tests[0].verdict, r.detail) for r in fresh
    ]
