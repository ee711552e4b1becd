"""The candidate's process reaching its parent checker by what the same uid allows: each attack scored, none masked.

The candidate runs as the checker's child under the same uid. Non-dumpable keeps it out of the checker's memory and
descriptors (tests/integration/test_attacks_checker.py), but two things need no more than the same uid: signals
other than the KILL and STOP tried there (SIGINT raises KeyboardInterrupt inside the test; SIGTERM, SIGUSR1 end it)
and ``prlimit`` (the kernel checks uids only, not dumpability). Each attack below answers wrong; each must score 0
and never be masked (the checker's masked outcomes, ``unsupported``, ``task_error``, ``checker_error``, must not be
reachable once the candidate runs). The honest control passes.
"""

from __future__ import annotations

import pytest

from tests.checker_support import HONEST, LOOP, grade

pytestmark = pytest.mark.docker


PRLIMIT = (
    "    import ctypes, os\n"
    "    class Limit(ctypes.Structure):\n"
    "        _fields_ = [('cur', ctypes.c_ulonglong), ('max', ctypes.c_ulonglong)]\n"
    "    libc = ctypes.CDLL(None, use_errno=True)\n"
    "    libc.prlimit64(os.getppid(), {resource}, ctypes.byref(Limit({value}, {value})), None)\n"
    "    return -1\n"
)
ATTACKS = {
    "SIGINT to the checker": "    import os, signal\n    os.kill(os.getppid(), signal.SIGINT)\n    return -1\n",
    "SIGINT to the checker, then the right value": "    import os, signal\n"
    "    os.kill(os.getppid(), signal.SIGINT)\n    return 2 * x if x else -1\n",
    "SIGTERM to the checker": "    import os, signal\n    os.kill(os.getppid(), signal.SIGTERM)\n    return -1\n",
    "SIGUSR1 to the checker": "    import os, signal\n    os.kill(os.getppid(), signal.SIGUSR1)\n    return -1\n",
    "the checker's address space cut to 1 MiB": PRLIMIT.format(resource=9, value=1 << 20),
    "the checker's descriptors cut to 3": PRLIMIT.format(resource=7, value=3),
    "the checker's CPU cut to 0 s": PRLIMIT.format(resource=0, value=0),
}


def test_signals_and_limits_on_the_checker_score_zero_never_masked():
    results = grade(HONEST["loop"], *[(LOOP, code) for code in ATTACKS.values()])
    honest, attacks = results[0], results[1:]
    assert honest.passed, honest.tests
    for name, result in zip(ATTACKS, attacks):
        verdicts = [(t.verdict, t.detail) for t in result.tests]
        assert not result.infra_error and not result.passed and result.fraction == 0.0, (name, verdicts)
