"""Self-play chains (gym/selfplay/chain.py, gym/selfplay/run.py, gym/selfplay/chain_bundle.py): the acceptance rule, the step
labels and the verifier-row writer, the streamed output files, and the offline re-check of a chain
bundle, which reports identical for an untouched bundle and a difference for each kind of tampering."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
import trio

from gym.bundle import BundleError
from gym.environment import Environment
from gym.registry import environment_config
from gym.selfplay.chain import check_row, decide, step_labels, verifier_row
from gym.selfplay.chain_bundle import ChainBundle, is_chain_bundle, read_chain_bundle, replay_chain, write_chain_bundle
from gym.selfplay.roles import MetaVerdict, Solution, Verdict
from gym.selfplay.run import ChainRunner, JsonlFile, SelfplayConfig, SelfplayOutput, role_seed, sampled_for_replay
from gym.selfplay.scripted import answers_wrong, load_selfplay_scripted
from gym.trajectory import Event
from sandbox import failure
from tasks.math.grader import MathGrader
from tasks.result import TaskResult, TestResult

ROOT = Path(__file__).resolve().parents[2]
SOLUTION = Solution(steps=("a", "b", "c"), answer="7")


def grading(passed: bool, infra: bool = False) -> TaskResult:
    verdict = (
        failure.Verdict.INFRA_ERROR if infra else failure.Verdict.PASSED if passed else failure.Verdict.WRONG_ANSWER
    )
    return TaskResult(
        task_id="t",
        passed=passed,
        fraction=float(passed),
        infra_error=infra,
        tests=(TestResult(index=0, verdict=verdict),),
    )


RIGHT, WRONG = grading(True), grading(False)
SAYS_RIGHT = Verdict(steps_correct=(True, True, True), correct=True)
SAYS_WRONG = Verdict(steps_correct=(True, False, False), correct=False)
AGREE, DISAGREE = MetaVerdict(agree=True), MetaVerdict(agree=False)


@pytest.mark.parametrize(
    ("args", "accepted", "reason"),
    [
        ((SOLUTION, RIGHT, SAYS_RIGHT, AGREE), True, None),
        ((SOLUTION, WRONG, SAYS_WRONG, AGREE), True, None),
        ((None, None, None, None), False, "generator_failed"),
        ((SOLUTION, None, None, None), False, "check_infra"),
        ((SOLUTION, grading(False, infra=True), SAYS_WRONG, AGREE), False, "check_infra"),
        ((SOLUTION, RIGHT, None, AGREE), False, "verifier_failed"),
        ((SOLUTION, RIGHT, SAYS_WRONG, AGREE), False, "verifier_disagrees"),
        ((SOLUTION, WRONG, SAYS_RIGHT, AGREE), False, "verifier_disagrees"),
        ((SOLUTION, RIGHT, SAYS_RIGHT, None), False, "meta_failed"),
        ((SOLUTION, WRONG, SAYS_WRONG, DISAGREE), False, "meta_rejects"),
    ],
)
def test_acceptance_rule(args, accepted, reason):
    decision = decide(*args)
    assert (decision.accepted, decision.reason) == (accepted, reason)


def test_step_labels():
    assert step_labels(3, True, None) == [1, 1, 1]
    assert step_labels(3, True, 0) == [1, 1, 1]  # a right answer: the check vouches for every step
    assert step_labels(4, False, 1) == [1, 0, 0, 0]
    assert step_labels(2, False, 0) == [0, 0]
    assert step_labels(3, False, None) is None
    assert step_labels(3, False, 3) is None


@pytest.mark.parametrize(
    "row",
    [
        {"id": "x", "problem": "p", "steps": ["a", "b"], "labels": [1], "source": "s"},
        {"id": "x", "problem": "p", "steps": ["a"], "labels": [True], "source": "s"},
        {"id": "x", "problem": "p", "steps": ["a"], "labels": [2], "source": "s"},
        {"id": "x", "problem": "p", "steps": [], "labels": [], "source": "s"},
        {"id": "x", "problem": "p", "steps": [""], "labels": [1], "source": "s"},
        {"id": "", "problem": "p", "steps": ["a"], "labels": [1], "source": "s"},
        {"id": "x", "problem": "p", "steps": ["a"], "labels": [1], "source": "s", "extra": 1},
        {"id": "x", "problem": "p", "steps": ["a"], "labels": [1]},
    ],
)
def test_a_malformed_row_is_refused(row):
    with pytest.raises(ValueError):
        check_row(row)


def test_jsonl_file_appends_whole_lines(tmp_path):
    sink = JsonlFile(tmp_path / "x.jsonl")
    sink.append({"a": 1})
    assert (tmp_path / "x.jsonl").read_text() == '{"a": 1}\n'  # on disk before close
    sink.append({"b": "é"})
    sink.close()
    assert [json.loads(line) for line in (tmp_path / "x.jsonl").read_text(encoding="utf-8").splitlines()] == [
        {"a": 1},
        {"b": "é"},
    ]


def test_seeds_and_bundle_sampling_are_deterministic():
    assert role_seed(0, 3, "verifier") == role_seed(0, 3, "verifier") != role_seed(0, 3, "generator")
    assert role_seed(0, 3, "verifier") != role_seed(1, 3, "verifier")
    picks = [sampled_for_replay(f"0-{i}", 0.5, 0) for i in range(400)]
    assert 150 < sum(picks) < 250 and picks == [sampled_for_replay(f"0-{i}", 0.5, 0) for i in range(400)]
    assert not any(sampled_for_replay(f"0-{i}", 0.0, 0) for i in range(50))
    assert all(sampled_for_replay(f"0-{i}", 1.0, 0) for i in range(50))


# -- chains from the scripted policy ------------------------------------------


@pytest.fixture(scope="module")
def env() -> Environment:
    import os

    here = os.getcwd()
    os.chdir(ROOT)  # the config's pool paths are relative to the repository root
    try:
        return Environment(environment_config("configs/math_smoke.yaml"))
    finally:
        os.chdir(here)


def chains(env: Environment, mode: str, n: int, **config: object):
    settings = SelfplayConfig(environment="configs/math_smoke.yaml", policy=f"scripted:{mode}", **config)
    runner = ChainRunner(settings, env, load_selfplay_scripted(mode, env, settings.prompts))

    async def main():
        return [await runner.run(task, position) for position, task in env.stream().take(n)]

    return settings, trio.run(main)


@pytest.fixture(scope="module")
def scripted(env):
    return chains(env, "selfplay", 4, replay_rate=1.0)


def test_scripted_chains_and_their_rows(scripted):
    _, made = scripted
    assert all(c.decision.accepted for c in made)
    for chain in made:
        row = verifier_row(chain)
        solution = chain.output("generator")
        assert row is not None and row["steps"] == list(solution.steps)
        if answers_wrong(chain.task):
            assert chain.grading.passed is False and row["source"] == "selfplay:flagged"
            assert row["labels"] == [1] * (len(solution.steps) - 1) + [0]
        else:
            assert chain.grading.passed is True and row == {**row, "labels": [1] * len(solution.steps)}
    assert {answers_wrong(c.task) for c in made} == {True, False}


def test_a_gullible_verifier_is_rejected_and_gives_no_row_for_a_wrong_answer(env):
    _, made = chains(env, "selfplay-gullible", 2)
    assert {answers_wrong(c.task) for c in made} == {True, False}
    for chain in made:
        if answers_wrong(chain.task):
            assert chain.decision.reason == "verifier_disagrees" and verifier_row(chain) is None
            assert [r.role for r in chain.roles] == ["generator", "verifier"]  # the meta-verifier is not run
        else:
            assert chain.decision.accepted and verifier_row(chain)["source"] == "selfplay:right"


def test_a_contrarian_meta_verifier_accepts_nothing(env):
    _, made = chains(env, "selfplay-contrarian", 2)
    assert [c.decision.reason for c in made] == ["meta_rejects"] * 2


def test_a_prompt_that_fills_the_context_is_a_failure(env):
    _, made = chains(env, "selfplay", 1, max_context_tokens=16)
    record = made[0].roles[0]
    assert record.failure.kind == "context_full" and record.trajectory.completion_ids == ()
    assert made[0].decision.reason == "generator_failed"


def test_output_streams_each_chain(env, scripted, tmp_path):
    settings, made = scripted
    output = SelfplayOutput(tmp_path, settings, env)
    for chain in made:
        output.add(chain)
    output.close()
    lines = {name: (tmp_path / name).read_text().splitlines() for name in ("chains.jsonl", "accepted.jsonl")}
    rows = [json.loads(line) for line in (tmp_path / "verifier_rows.jsonl").read_text().splitlines()]
    assert len(lines["chains.jsonl"]) == len(lines["accepted.jsonl"]) == len(rows) == 4
    for row in rows:
        check_row(row)
    bundles = sorted((tmp_path / "bundles").iterdir())
    assert len(bundles) == 4 and all(is_chain_bundle(path) for path in bundles)
    accepted = [json.loads(line) for line in lines["accepted.jsonl"]]
    assert {a["bundle"] for a in accepted} == {str(p.relative_to(tmp_path)) for p in bundles}
    summary = output.tally.summary(10.0, 1.0)
    assert (summary["chains"], summary["accepted"], summary["acceptance_rate"], summary["bundles"]) == (4, 4, 1.0, 4)
    assert summary["verifier"]["agrees_with_check"] == 4 and summary["parse_failures"] == 0


# -- the offline re-check of a chain bundle ----------------------------------


@pytest.fixture(scope="module")
def bundle(env, scripted) -> ChainBundle:
    settings, made = scripted
    chain = next(c for c in made if answers_wrong(c.task))  # the richer case: a flagged step, labels with a 0
    return ChainBundle(
        environment=env.name,
        tokenizer=env.config.tokenizer,
        prompts=settings.prompts,
        math=env.config.math,
        chain=chain,
        row=verifier_row(chain),
    )


class MemoGrader:
    """The real math check, run once per (task, answer): the tampering cases share the untouched answer."""

    def __init__(self) -> None:
        self.grader, self.seen = MathGrader(), {}

    async def grade(self, task, answer):
        if (task.task_id, answer) not in self.seen:
            self.seen[task.task_id, answer] = await self.grader.grade(task, answer)
        return self.seen[task.task_id, answer]


MEMO = MemoGrader()


def replayed(bundle: ChainBundle):
    return trio.run(functools.partial(replay_chain, bundle, grader=MEMO))


def test_an_untouched_bundle_replays_identically(bundle, tmp_path):
    path = write_chain_bundle(tmp_path / "b.json", bundle)
    assert is_chain_bundle(path) and read_chain_bundle(path) == bundle
    report = replayed(bundle)
    assert report.identical, report.differences
    assert (report.reward_recorded, report.reward_replayed, report.tool_calls) == (0.0, 0.0, 0)


def _with_role(bundle: ChainBundle, index: int, **update) -> ChainBundle:
    roles = list(bundle.chain.roles)
    roles[index] = roles[index].model_copy(update=update)
    return bundle.model_copy(update={"chain": bundle.chain.model_copy(update={"roles": tuple(roles)})})


def test_tampering_is_reported(bundle):
    verifier = bundle.chain.roles[1]
    ids = list(verifier.trajectory.ids)
    flipped = verifier.trajectory.model_copy(update={"ids": tuple(ids[:-3] + [ids[-5]] + ids[-2:])})
    cases = {
        "verifier trajectory messages": _with_role(bundle, 1, trajectory=flipped),
        "verifier parsed output": _with_role(bundle, 1, output=Verdict(steps_correct=(True,) * 3, correct=True)),
        "decision": bundle.model_copy(
            update={"chain": bundle.chain.model_copy(update={"decision": decide(None, None, None, None)})}
        ),
        "math check": bundle.model_copy(update={"chain": bundle.chain.model_copy(update={"grading": RIGHT})}),
        "verifier row": bundle.model_copy(update={"row": {**bundle.row, "labels": [1] * len(bundle.row["labels"])}}),
        "generator prompt": bundle.model_copy(
            update={"prompts": bundle.prompts.model_copy(update={"generator": "Solve it."})}
        ),
    }
    for name, tampered in cases.items():
        report = replayed(tampered)
        assert not report.identical, name
        assert any(name in d.what for d in report.differences), (name, report.differences)


def test_a_tool_call_in_a_role_is_reported(bundle):
    generator = bundle.chain.roles[0].trajectory
    forged = Event(kind="result", start=0, end=1, tool="functions.python")
    report = replayed(_with_role(bundle, 0, trajectory=generator.model_copy(update={"events": (forged,)})))
    assert any("tool calls and results" in d.what for d in report.differences), report.differences


def test_a_file_that_is_not_a_chain_bundle(tmp_path):
    (tmp_path / "a.json").write_text('{"kind": "episode"}')
    (tmp_path / "b.json").write_text("not json")
    assert not is_chain_bundle(tmp_path / "a.json") and not is_chain_bundle(tmp_path / "b.json")
    assert not is_chain_bundle(tmp_path / "missing.json")
    (tmp_path / "c.json").write_text('{"kind": "selfplay_chain", "format_version": 1}')
    with pytest.raises(BundleError, match="not a chain bundle"):
        read_chain_bundle(tmp_path / "c.json")
