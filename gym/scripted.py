"""Scripted policies: ``scripted:reference`` works each task's reference through the tools,
``scripted:empty`` submits nothing of worth at once (every reward 0: the floor a checker can test),
``scripted:wrong`` answers every math task with a wrong answer (its gold plus one) and CP/SWE tasks as ``empty``.

It needs no model, so environments can be smoke-tested and benchmarked. Like
a real policy it sees only token ids: it parses the context back into Harmony
messages, recognises the task by its user message, counts the tool calls it
has made so far, and samples (deterministically) the next turn of its script:

1. an analysis note, then ``write_file`` of the reference program to ``solution.py``;
2. ``bash`` running ``python3 solution.py`` on the first public example's input
   (stdin tasks with an example), else ``python3 -m py_compile solution.py``;
3. ``submit`` with ``{"path": "solution.py"}``.

It uses only the tools the environment offers: without ``bash`` it skips step 2, without
``write_file`` it submits ``{"code": PROGRAM}`` at once.

For an SWE instance the reference is its gold patch: ``apply_patch`` of it in
``repo``, ``bash`` running the pytest files the instance's tests live in that
exist at base_commit, then ``submit`` (the repository's diff is the answer).
``scripted:empty`` calls ``submit`` first: an empty program, or an untouched
repository.

A math task (`tasks.math.problem.MathTask`) is answered in one turn: an analysis
note, then the reference answer (the solutions file's, else the gold) alone on
the final channel; ``scripted:empty`` gives an empty final answer.

In an environment whose chat format is a model family's (`gym.format.families`),
``TemplatePolicy`` plays the same scripts in that format: each turn is the format's
canonical rendering (the family's own tool-call text; the notes it has no place
for, before an answer or a Llama call, left out), the task is found by its prompt's
ids and the step by the script's turns the context holds (docs/chat_formats.md).

Each turn is the canonical Harmony rendering of its messages, encoded with the
environment's tokenizer (real token ids, special tokens as single ids), with
every logprob 0.0: the script is deterministic, so each token has probability
1 under the distribution it is sampled from. A turn longer than ``max_tokens``
is cut there with ``finish_reason="length"``, as a real engine would.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any

from gym.format.families.family import TemplateFamily
from gym.format.harmony import Harmony, ParseError
from gym.format.message import Message
from policies.sampling import Completion, SamplingParams
from tasks.families import AnyTask, kind_of
from tasks.swe.instance import SweInstance
from tasks.task import StdinTest

if TYPE_CHECKING:
    from gym.environment import Environment

PROGRAM_FILE = "solution.py"


class ReferencePolicy:
    """A deterministic ``RolloutEngine`` that solves tasks with their references (or, ``empty``, submits nothing)."""

    def __init__(
        self,
        harmony: Harmony,
        tasks: dict[str, AnyTask],
        programs: dict[str, str],
        user_text: dict[str, str],
        weights_version: int = 0,
        empty: bool = False,
        tools: tuple[str, ...] = ("bash", "write_file", "submit"),
    ) -> None:
        missing = [] if empty else sorted(set(tasks) - set(programs))
        if missing:
            raise ValueError(f"scripted:reference needs a reference solution for every task; none for {missing[:10]}")
        self.harmony = harmony
        self.tasks = tasks
        self.programs = programs
        self.by_prompt = {text: task_id for task_id, text in user_text.items()}
        self.weights_version = weights_version
        self.empty = empty
        self.tools = tools

    def script(self, task: AnyTask) -> list[list[Message]]:
        """The turns, each a list of assistant messages, by what the task's family takes as its answer."""
        answer = kind_of(task).answer
        if answer == "answer":  # the final-channel message (math)
            text = self.programs.get(task.task_id, "")  # scripted:empty has none; scripted:wrong, wrong ones
            return [[Message.assistant("analysis", "I will work it out."), Message.assistant("final", text)]]
        if self.empty:  # submit takes the program, or nothing (the repository's diff is the answer)
            return [[Message.tool_call("submit", {} if answer == "repository" else {"code": ""})]]
        if answer == "repository":
            return swe_script(task)
        if "write_file" not in self.tools:
            return [[Message.tool_call("submit", {"code": self.programs[task.task_id]})]]
        example = next((t for t in task.public_tests if isinstance(t, StdinTest)), None)
        if task.kind == "stdin" and example is not None:
            check = (
                "Let me run it on the example input.",
                {"command": f"python3 {PROGRAM_FILE}", "stdin": example.input},
            )
        else:
            check = ("Let me check that it compiles.", {"command": f"python3 -m py_compile {PROGRAM_FILE}"})
        checks = (
            [[Message.assistant("analysis", check[0]), Message.tool_call("bash", check[1])]]
            if "bash" in self.tools
            else []
        )
        return [
            [
                Message.assistant("analysis", f"I will write my solution to {PROGRAM_FILE}."),
                Message.tool_call("write_file", {"path": PROGRAM_FILE, "content": self.programs[task.task_id]}),
            ],
            *checks,
            [Message.tool_call("submit", {"path": PROGRAM_FILE})],
        ]

    def _task_of(self, prompt: list[int]) -> tuple[AnyTask, int]:
        """The task a context is about and how many tool calls it already holds."""
        suffix = self.harmony.generation_prompt()
        if prompt[-len(suffix) :] != suffix:
            raise ValueError("scripted:reference continues contexts that end with <|start|>assistant")
        messages = self.harmony.parse_conversation(prompt[: -len(suffix)])
        if isinstance(messages, ParseError):
            raise ValueError(f"scripted:reference cannot read its context: {messages.reason}")
        user = next((m.content for m in messages if m.role == "user"), None)
        if user not in self.by_prompt:
            raise ValueError("scripted:reference does not know the task of this context")
        return self.tasks[self.by_prompt[user]], sum(m.is_tool_call for m in messages)

    def next_turn(self, prompt: list[int]) -> list[int]:
        """The ids of the script's next turn for a context."""
        task, step = self._task_of(prompt)
        turns = self.script(task)
        return self.harmony.render_completion(turns[min(step, len(turns) - 1)])

    def complete(self, prompt: list[int], params: SamplingParams) -> Completion:
        ids = self.next_turn(prompt)
        cut = ids[: params.max_tokens]
        stopped = bool(cut) and cut[-1] in params.stop_token_ids
        return Completion(
            token_ids=cut,
            logprobs=[0.0] * len(cut),
            raw_logprobs=[0.0] * len(cut),
            finish_reason="stop" if stopped else "length",
            weights_version=self.weights_version,
        )

    async def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        return [self.complete(prompt, params) for prompt in prompts]


class TemplatePolicy(ReferencePolicy):
    """The same scripts in a model family's chat format (`gym.format.families`): each turn is the format's
    canonical rendering of the script's messages, fit to what the format writes (no note before an answer,
    nor before a Llama call), so the policy emits the family's own tool-call text as token ids. It reads only
    ids: the task is the one whose prompt (rendered once per task, on first use) the context starts with,
    and the step is how many of the script's turns the context already holds, in order."""

    def __init__(self, env: Environment, *args: Any, **kwargs: Any) -> None:
        super().__init__(env.harmony, *args, **kwargs)
        self.env = env
        self._prompts: dict[tuple[int, ...], str] = {}

    def turns(self, task: AnyTask) -> list[list[int]]:
        chat_format = self.env.format_for(task)
        assert isinstance(chat_format, TemplateFamily), "TemplatePolicy scripts a model family's format"
        return [chat_format.render_completion(chat_format.fit_turn(turn)) for turn in self.script(task)]

    def next_turn(self, prompt: list[int]) -> list[int]:
        if not self._prompts:
            for task_id, task in self.tasks.items():
                rendered = self.env.format_for(task).render_prompt(self.env.prompt(task))
                self._prompts.setdefault(tuple(rendered), task_id)
        found = next(((p, t) for p, t in self._prompts.items() if tuple(prompt[: len(p)]) == p), None)
        if found is None:
            raise ValueError("scripted policy does not know the task of this context")
        turns = self.turns(self.tasks[found[1]])
        return turns[min(_held(prompt[len(found[0]) :], turns), len(turns) - 1)]


def _held(context: list[int], turns: list[list[int]]) -> int:
    """How many of ``turns`` the context holds one after the other (ids as characters: one substring search each)."""
    text, position, held = "".join(map(chr, context)), 0, 0
    for turn in turns:
        found = text.find("".join(map(chr, turn)), position)
        if found < 0:
            break
        position, held = found + len(turn), held + 1
    return held


def swe_script(instance: SweInstance) -> list[list[Message]]:
    """Gold patch in, the instance's existing test files run, submit."""
    files = " ".join(shlex.quote(path) for path in instance.test_files() if path.endswith(".py"))
    # pytest's durations are cut so the observation is the same on every run (replays compare it byte for byte)
    run = (
        f"python -m pytest -q -p no:cacheprovider $(ls {files} 2>/dev/null) 2>&1 | tail -n 5 "
        "| sed -E 's/ in [0-9.]+s( \\([^)]*\\))?//'"
    )
    return [
        [
            Message.assistant("analysis", "I will apply my fix to the repository."),
            Message.tool_call("apply_patch", {"patch": instance.patch, "cwd": "repo"}),
        ],
        [
            Message.assistant("analysis", "Let me run the tests that exist."),
            Message.tool_call("bash", {"command": run, "cwd": "repo", "timeout": 60}),
        ],
        [Message.tool_call("submit", {})],
    ]


SCRIPTS = ("reference", "empty", "wrong")


def wrong_answer(task: AnyTask) -> str | None:
    """An answer that is never right, as the task's family makes one (math: the gold plus one); None for a task
    that has none (``scripted:wrong`` answers it as ``scripted:empty``)."""
    return kind_of(task).wrong_answer(task)


def load_scripted(argument: str, env: Environment) -> ReferencePolicy:
    """``scripted:reference``, ``scripted:empty`` or ``scripted:wrong`` for an environment."""
    if argument not in SCRIPTS:
        raise ValueError(f"unknown scripted policy {argument!r}; known: {', '.join(SCRIPTS)}")
    from gym.environment import task_text

    user_text = {task_id: task_text(task) for task_id, task in env.tasks.items()}
    empty = argument == "empty"
    programs = {} if empty else env.reference_programs()
    if argument == "wrong":  # wrong math answers; every other task as scripted:empty
        wrong = {task_id: wrong_answer(task) for task_id, task in env.tasks.items()}
        programs = {task_id: answer for task_id, answer in wrong.items() if answer is not None}
        empty = True
    if env.chat_format is not env.harmony:
        return TemplatePolicy(env, env.tasks, programs, user_text, empty=empty, tools=tuple(env.config.tools.enabled))
    return ReferencePolicy(
        env.harmony,
        env.tasks,
        programs,
        user_text,
        empty=empty,
        tools=tuple(env.config.tools.enabled),
    )
