"""Scripted self-play policies: deterministic players of the three roles, for tests and smoke runs.

Like `gym.scripted.ReferencePolicy` it sees only token ids: it parses the context back into Harmony
messages, tells the role by the developer message (the run's role prompts) and the problem by the user
message, and answers with the canonical rendering of its turn (every logprob 0.0):

* **generator**: the problem's worked solution, one line per step (the row's solution lines, or one
  line for a row without one), then ``So the answer is A.``; ``A`` on the final channel. ``A`` is
  the reference answer (the solutions file's, else the gold) for half of the problems and a wrong
  one (`gym.scripted.wrong_answer`: the gold plus one) for the other half, chosen by a hash of the
  task id, so a run meets right and wrong answers;
* **verifier**: every step correct and ``VERDICT: correct`` when the answer is the reference one;
  otherwise the last step (the one stating the answer) ``wrong`` and ``VERDICT: wrong``;
* **meta-verifier**: ``META: agree``.

Modes (``scripted:MODE``): ``selfplay`` as above (every chain accepted); ``selfplay-gullible``, a
verifier that calls every solution correct (chains with a wrong answer are rejected as
``verifier_disagrees``); ``selfplay-contrarian``, a meta-verifier that always disagrees (nothing
accepted).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from gym.format.harmony import Harmony
from gym.format.message import Message
from gym.format.prompt import developer_message
from gym.scripted import wrong_answer
from gym.selfplay.roles import ROLES, Role, RolePrompts, Verdict, verdict_text
from policies.sampling import Completion, SamplingParams
from tasks.families import kind_of
from tasks.math.family import MATH
from tasks.math.problem import MathTask

if TYPE_CHECKING:
    from gym.environment import Environment

MODES = ("selfplay", "selfplay-gullible", "selfplay-contrarian")


def answers_wrong(task: MathTask) -> bool:
    """Whether the scripted generator answers ``task`` wrongly (a hash of its id: half of the tasks)."""
    return hashlib.sha256(task.task_id.encode()).digest()[0] % 2 == 1


def scripted_steps(task: MathTask, answer: str, prompts: RolePrompts) -> list[str]:
    """The scripted generator's steps: the row's solution lines (cut to the parser's bounds) and the answer."""
    lines = [line.strip() for line in task.solution.splitlines() if line.strip()] or [f"We need: {task.problem}"]
    lines = [line[: prompts.max_step_chars] for line in lines][: prompts.max_steps - 1]
    return [*lines, f"So the answer is {answer}."[: prompts.max_step_chars]]


class SelfplayScriptedPolicy:
    """A deterministic ``RolloutEngine`` playing the three roles (module docstring)."""

    def __init__(
        self, harmony: Harmony, prompts: RolePrompts, tasks: list[MathTask], references: dict[str, str], mode: str
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown scripted self-play policy {mode!r}; known: {', '.join(MODES)}")
        self.harmony, self.prompts, self.mode = harmony, prompts, mode
        self.by_problem = {task.problem: task for task in tasks}
        self.references = references
        self.roles = {developer_message(getattr(prompts, role)).content: role for role in ROLES}
        self.suffix = harmony.generation_prompt()

    def answer(self, task: MathTask) -> str:
        reference = self.references.get(task.task_id, task.gold)
        return wrong_answer(task) if answers_wrong(task) else reference

    def turn(self, role: Role, task: MathTask, user: str) -> list[Message]:
        if role == "generator":
            answer = self.answer(task)
            steps = scripted_steps(task, answer, self.prompts)
            return [Message.assistant("analysis", "\n".join(steps)), Message.assistant("final", answer)]
        if role == "verifier":
            steps = user.split("\n\nSolution steps:\n", 1)[1].split("\n\nFinal answer: ", 1)[0].splitlines()
            right = self.mode == "selfplay-gullible" or not answers_wrong(task)
            labels = [True] * len(steps) if right else [True] * (len(steps) - 1) + [False]
            verdict = Verdict(steps_correct=tuple(labels), correct=right)
            return [
                Message.assistant("analysis", "I checked each step."),
                Message.assistant("final", verdict_text(verdict)),
            ]
        agree = self.mode != "selfplay-contrarian"
        return [Message.assistant("final", f"META: {'agree' if agree else 'disagree'}")]

    def _context(self, prompt: list[int]) -> tuple[Role, MathTask, str]:
        head, tail = prompt[: -len(self.suffix)], prompt[-len(self.suffix) :]
        messages = self.harmony.parse_conversation(head) if tail == self.suffix else None
        if not isinstance(messages, list):
            raise ValueError("scripted self-play reads rendered conversations ending with <|start|>assistant")
        developer = next((m.content for m in messages if m.role == "developer"), None)
        user = next((m.content for m in messages if m.role == "user"), "")
        role = self.roles.get(developer or "")
        if role is None:
            raise ValueError("scripted self-play does not know the role of this context")
        problem = user if role == "generator" else user.removeprefix("Problem:\n").split("\n\nSolution steps:\n")[0]
        if problem not in self.by_problem:
            raise ValueError("scripted self-play does not know the problem of this context")
        return role, self.by_problem[problem], user

    def complete(self, prompt: list[int], params: SamplingParams) -> Completion:
        ids = self.harmony.render_completion(self.turn(*self._context(prompt)))[: params.max_tokens]
        zeros = [0.0] * len(ids)  # deterministic: every token had probability 1
        finish = "stop" if ids and ids[-1] in params.stop_token_ids else "length"
        return Completion(token_ids=ids, logprobs=zeros, raw_logprobs=zeros, finish_reason=finish, weights_version=0)

    async def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        return [self.complete(prompt, params) for prompt in prompts]


def load_selfplay_scripted(mode: str, env: Environment, prompts: RolePrompts) -> SelfplayScriptedPolicy:
    """``scripted:selfplay[-gullible|-contrarian]`` over an environment's math tasks."""
    tasks = [task for task in env.tasks.values() if kind_of(task) is MATH]
    references = {task_id: text for task_id, text in env.reference_programs().items() if task_id in env.tasks}
    return SelfplayScriptedPolicy(env.harmony, prompts, tasks, references, mode)
