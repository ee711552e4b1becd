"""The process verifier's token layout: a step-labelled row as Harmony token ids, with one label slot per step.

A row (`tasks.step_labels.StepRow`) renders as a canonical Harmony conversation: the problem as a
user message, then each step as its own assistant message on the analysis channel::

    <|start|>user<|message|>{problem}<|end|>
    <|start|>assistant<|channel|>analysis<|message|>{step 1}<|end|>      <- label slot of step 1
    <|start|>assistant<|channel|>analysis<|message|>{step 2}<|end|>      <- label slot of step 2

The label slot of a step is the position of its ``<|end|>``: the verifier reads the logits there,
as the next-token prediction after the whole step (and everything before it), restricted to two
label tokens: ``" +"`` (correct) and ``" -"`` (wrong) by default, each one ordinary text token
(`VerifierFormat` refuses a label text that encodes to more or fewer than one id). Nothing about a
label is in the input, so one forward pass scores every step, in training and in serving alike
(the Math-Shepherd layout, with Harmony's ``<|end|>`` as the step tag).

The label slots of a sequence are also found without its row: the ``<|end|>`` of every message that
opens with ``<|start|>assistant``. The server's ``/v1/score`` applies that rule
(`policies.scorer.slot_positions`) to the ids a verifier checkpoint records (`VerifierFormat.describe`).
"""

from __future__ import annotations

from dataclasses import dataclass

from gym.format.harmony import Harmony
from gym.format.message import Message
from gym.format.tokenizer import Tokenizer, TokenizerError
from tasks.step_labels import StepRow

DEFAULT_CORRECT = " +"
DEFAULT_WRONG = " -"


class VerifierFormatError(TokenizerError):
    """A label text that is not exactly one token of the tokenizer (the message names it and its ids)."""


@dataclass(frozen=True)
class RenderedRow:
    """One row as token ids: ``positions[k]`` is step k's label slot, ``labels[k]`` its label (None: unscored)."""

    row_id: str
    ids: list[int]
    positions: list[int]
    labels: list[int | None]


def single_token(tokenizer: Tokenizer, text: str) -> int:
    """The one id ``text`` encodes to; VerifierFormatError otherwise."""
    ids = tokenizer.encode(text)
    if len(ids) != 1:
        raise VerifierFormatError(
            f"label text {text!r} is {len(ids)} tokens {ids} in tokenizer {tokenizer.name}; "
            "a label must be exactly one token (set other `label_texts` in the verifier config)"
        )
    return ids[0]


class VerifierFormat:
    """Renders rows for one tokenizer and knows the two label ids."""

    def __init__(self, tokenizer: Tokenizer, correct: str = DEFAULT_CORRECT, wrong: str = DEFAULT_WRONG) -> None:
        self.tokenizer = tokenizer
        self.harmony = Harmony(tokenizer)
        self.correct_text, self.wrong_text = correct, wrong
        self.correct_id = single_token(tokenizer, correct)
        self.wrong_id = single_token(tokenizer, wrong)
        if self.correct_id == self.wrong_id:
            raise VerifierFormatError(f"label texts {correct!r} and {wrong!r} are the same token {self.correct_id}")
        self.end_id = tokenizer.special("end")
        self.step_prefix = self.harmony.generation_prompt()  # <|start|>assistant

    @property
    def label_ids(self) -> tuple[int, int]:
        """(correct, wrong): index 0 of a two-way softmax over these is p(correct)."""
        return self.correct_id, self.wrong_id

    def render(self, row: StepRow) -> RenderedRow:
        """The row's ids, its label slots (one per step) and labels."""
        ids = self.harmony.render_message(Message(role="user", content=row.problem))
        positions = []
        for step in row.steps:
            ids += self.harmony.render_message(Message(role="assistant", channel="analysis", content=step))
            positions.append(len(ids) - 1)  # the step's <|end|>
        return RenderedRow(row_id=row.id, ids=ids, positions=positions, labels=list(row.labels))

    def describe(self) -> dict:
        """What a checkpoint records so a server can score without the tokenizer (JSON-ready)."""
        return {
            "layout": "harmony-step-end",
            "tokenizer": self.tokenizer.name,
            "tokenizer_fingerprint": self.tokenizer.fingerprint,
            "correct_text": self.correct_text,
            "wrong_text": self.wrong_text,
            "label_ids": [self.correct_id, self.wrong_id],
            "step_prefix": list(self.step_prefix),
            "step_end_id": self.end_id,
        }
