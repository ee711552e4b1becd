"""`bench humaneval`'s own pieces: the wrong sample made from a canonical solution, and the harness's exec line
enabled only where it is commented out (the end-to-end agreement: tests/integration/test_bench_humaneval.py)."""

from __future__ import annotations

from gym.bench.humaneval import uncommented_exec, wrong_completion

PROMPT = 'def below(xs: list, t: int) -> bool:\n    """True when every x is below t."""\n'


def _run(prompt: str, completion: str, *args):
    scope: dict = {}
    exec(prompt + completion, scope)  # our own fixed source, as the harness runs a sample
    return scope["below"](*args)


def test_the_wrong_sample_negates_the_first_comparison_of_the_canonical_solution():
    canonical = "    for x in xs:\n        if x >= t:\n            return False\n    return True\n"
    wrong, kind = wrong_completion(PROMPT, canonical)
    assert kind == "negated comparison" and "if (not (x >= t)):" in wrong
    assert _run(PROMPT, canonical, [1, 2], 3) is True and _run(PROMPT, wrong, [1, 2], 3) is False


def test_without_a_comparison_the_first_return_value_becomes_none():
    wrong, kind = wrong_completion(PROMPT, "    return all(map(lambda x: x.__lt__(t), xs))\n")
    assert (wrong, kind) == ("    return None\n", "return None")
    assert wrong_completion(PROMPT, "    pass\n") == ("    return None\n", "return None only")


def test_a_non_ascii_prompt_keeps_the_cut_at_the_right_character():
    prompt = PROMPT.replace("every x", "every x — ü")
    wrong, _ = wrong_completion(prompt, "    return max(xs) < t\n")
    assert wrong == "    return (not (max(xs) < t))\n"


def test_the_harness_exec_is_enabled_only_where_it_is_commented_out():
    shipped = "            with swallow_io():\n                with time_limit(timeout):\n# WARNING\n#                         exec(check_program, exec_globals)\n"
    enabled = uncommented_exec(shipped)
    assert enabled == shipped.replace("#                         exec", "                          exec")
    compile("if True:\n" + enabled, "execution.py", "exec")  # the call sits in the with block it was under
    assert uncommented_exec(uncommented_exec(shipped)) is None  # enabled already (release 1.0.3 as installed)
