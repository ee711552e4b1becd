"""The process verifier's token layout (gym/format/verifier.py): single-token labels, one slot per step at
the step's <|end|>, a canonical Harmony conversation, and the server's slot rule finding the same slots."""

from __future__ import annotations

import pytest

from gym.format.harmony import Harmony
from gym.format.tokenizer import load_tokenizer
from gym.format.verifier import VerifierFormat, VerifierFormatError, single_token
from policies.scorer import slot_positions
from tasks.step_labels import StepRow


@pytest.fixture(scope="module")
def fmt() -> VerifierFormat:
    return VerifierFormat(load_tokenizer("bpe"))


ROW = StepRow(
    id="r", problem="Compute 2 * 3 + 4.", steps=("2 * 3 = 6", "6 + 4 = 10", "The answer is 10."), labels=(1, 1, None)
)


def test_default_labels_are_one_token_each_in_the_default_bpe(fmt):
    tokenizer = fmt.tokenizer
    assert tokenizer.encode(" +") == [fmt.correct_id] and tokenizer.encode(" -") == [fmt.wrong_id]
    assert fmt.correct_id != fmt.wrong_id and not tokenizer.is_special(fmt.correct_id)
    assert tokenizer.decode([fmt.correct_id]) == " +" and tokenizer.decode([fmt.wrong_id]) == " -"
    assert fmt.label_ids == (fmt.correct_id, fmt.wrong_id)


def test_a_label_text_of_several_tokens_is_refused(fmt):
    with pytest.raises(VerifierFormatError, match="exactly one token"):
        VerifierFormat(fmt.tokenizer, correct=" definitely correct")
    with pytest.raises(VerifierFormatError, match="same token"):
        VerifierFormat(fmt.tokenizer, correct=" +", wrong=" +")
    with pytest.raises(VerifierFormatError):
        single_token(fmt.tokenizer, "")


def test_one_slot_per_step_at_its_end_token(fmt):
    rendered = fmt.render(ROW)
    end = fmt.tokenizer.special("end")
    assert len(rendered.positions) == 3 and rendered.labels == [1, 1, None]
    assert [rendered.ids[p] for p in rendered.positions] == [end] * 3
    assert rendered.positions[-1] == len(rendered.ids) - 1
    # the text before each slot ends with that step, and no later step is visible there
    for position, step in zip(rendered.positions, ROW.steps):
        before = fmt.tokenizer.decode(rendered.ids[:position])
        assert before.endswith(step)
    assert fmt.tokenizer.decode(rendered.ids[: rendered.positions[0]]).count("<|start|>assistant") == 1


def test_rendering_is_a_canonical_harmony_conversation(fmt):
    rendered = fmt.render(ROW)
    messages = Harmony(fmt.tokenizer).parse_conversation(rendered.ids)
    assert [m.role for m in messages] == ["user", "assistant", "assistant", "assistant"]
    assert [m.content for m in messages] == [ROW.problem, *ROW.steps]
    assert all(m.channel == "analysis" for m in messages[1:])
    assert Harmony(fmt.tokenizer).render(messages) == rendered.ids


def test_labels_are_not_in_the_input(fmt):
    wrong = ROW.model_copy(update={"labels": (0, 0, 0)})
    assert fmt.render(wrong).ids == fmt.render(ROW).ids


def test_the_servers_slot_rule_finds_the_rendered_slots(fmt):
    meta = fmt.describe()
    for row in (ROW, ROW.model_copy(update={"steps": ("only step",), "labels": (0,)})):
        rendered = fmt.render(row)
        assert slot_positions(rendered.ids, meta["step_prefix"], meta["step_end_id"]) == rendered.positions
    # a user message's <|end|> is no slot, nor an assistant message on another role's heels
    assert slot_positions([5, 9, 6, 5, 9, 6], [5, 7], 6) == []
    assert slot_positions([5, 7, 1, 6, 5, 8, 6, 5, 7, 2, 6], [5, 7], 6) == [3, 10]
    assert meta["label_ids"] == [fmt.correct_id, fmt.wrong_id] and meta["tokenizer_fingerprint"]
