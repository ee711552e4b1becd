"""`policies.sampling.Routes`: a completion's routed experts as one int16 array, nested lists on the wire."""

from __future__ import annotations

import copy
import gc
import pickle

import numpy as np
import pytest
from pydantic import ValidationError

from policies.continuous import completion_routes
from policies.protocol import CompletionChoice
from policies.sampling import Completion, Routes


def completion(routes) -> Completion:
    return Completion(
        token_ids=[5, 6], logprobs=[-0.1, -0.2], raw_logprobs=[-0.1, -0.2], routed_experts=routes,
        finish_reason="length", weights_version=3,
    )  # fmt: skip


NESTED = [[[0, 1], [2, 3], [-1, -1]], [[4, 5], [6, 7], [-1, -1]]]  # (L=2, T=3, K=2)


def test_nested_lists_become_one_read_only_int16_array():
    c = completion(NESTED)
    assert isinstance(c.routed_experts, Routes) and c.routed_experts.shape == (2, 3, 2)
    assert c.routed_experts.array.dtype == np.int16 and not c.routed_experts.array.flags.writeable
    assert np.asarray(c.routed_experts).tolist() == NESTED == c.routed_experts.tolist()
    assert np.asarray(c.routed_experts, dtype=np.int64).dtype == np.int64
    assert np.asarray(c.routed_experts) is c.routed_experts.array  # no copy for the trainer's asarray
    mine = np.array(c.routed_experts)  # a copy, writable
    mine[0, 0, 0] = 7
    assert mine.flags.writeable and c.routed_experts.array[0, 0, 0] == 0
    assert len(c.routed_experts) == 2 and c.routed_experts[1][0].tolist() == [4, 5]
    with pytest.raises(ValueError, match="read-only"):
        c.routed_experts.array[0, 0, 0] = 7


def test_the_wire_and_dumps_carry_nested_lists_and_read_back_equal():
    c = completion(NESTED)
    assert c.model_dump()["routed_experts"] == NESTED
    assert '"routed_experts":[[[0,1],[2,3],[-1,-1]],[[4,5],[6,7],[-1,-1]]]' in c.model_dump_json()
    assert Completion.model_validate_json(c.model_dump_json()) == c
    assert pickle.loads(pickle.dumps(c)) == c  # spawned replicas send completions through a pipe
    for copied in (pickle.loads(pickle.dumps(c)), copy.deepcopy(c), c.model_copy(deep=True)):
        assert not copied.routed_experts.array.flags.writeable, copied  # read-only wherever it went
    other = completion([[[0, 1], [2, 3], [-1, -1]], [[4, 5], [6, 6], [-1, -1]]])
    assert other != c and other.routed_experts != c.routed_experts
    assert completion(None).routed_experts is None
    # the server's response models take the engine's Routes as they are and write lists
    choice = CompletionChoice(
        index=0, text="", logprobs={"tokens": [], "token_logprobs": [], "text_offset": []}, finish_reason="stop",
        token_ids=[], raw_logprobs=[], routed_experts=c.routed_experts, prompt_token_ids=[1],
    )  # fmt: skip
    assert choice.routed_experts is c.routed_experts and choice.model_dump()["routed_experts"] == NESTED


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ([[0, 1], [2, 3]], r"\[0\]\[0\] input should be a valid list"),  # no k axis
        (np.zeros((2, 2), dtype=np.int64), r"shape \(2, 2\)"),
        ([[[0, 1], [2]]], "inhomogeneous"),  # ragged
        ([[[0.5, 1.0]]], "valid integer"),  # not integers (nested lists of ints took 1.0 as 1 before)
        ([[[1, 2.0]]], "valid integer"),
        ([[[True, False]]], "valid integer"),
        ([[[True, 2]]], "valid integer"),  # numpy alone reads this as [[[1, 2]]]
        (np.array([[[True]]]), "of bool"),
        ([[["0", "1"]]], "valid integer"),
        ([[[-2, 0]]], "-1 or an expert index"),
        ([[[40000, 0]]], "-1 or an expert index"),
        ([[[2**70, 0]]], "-1 or an expert index|object"),
        ([], r"non-empty .* shape \(0,\)"),  # its own JSON could not be read back
        ([[[]]], r"non-empty .* shape \(1, 1, 0\)"),
        (np.zeros((2, 0, 2), dtype=np.int64), r"non-empty .* shape \(2, 0, 2\)"),
        ("routes", "shape"),
        ({"layer": 0}, "shape|integers"),
    ],
)
def test_malformed_routes_are_a_validation_error_naming_the_field(bad, why):
    with pytest.raises(ValidationError, match=f"routed_experts.*{why}"):
        completion(bad)


def test_an_engine_completion_holds_one_array_not_nested_lists():
    """The assembled routes of a completion are one tracked object for the garbage collector, not one list per
    layer and position: 64 completions of 780 positions held ~100,000 lists a GRPO step."""
    prompt = np.zeros((2, 700, 2), dtype=np.int64)
    fed = [np.ones((2, 2), dtype=np.int64) for _ in range(80)]
    gc.collect()
    before = len(gc.get_objects())
    kept = [completion_routes(prompt, fed, 81) for _ in range(64)]
    grown = len(gc.get_objects()) - before
    assert kept[0].shape == (2, 781, 2) and kept[0][0, 700].tolist() == [1, 1] and kept[0][0, 780].tolist() == [-1, -1]
    assert grown < 1000, grown  # with nested lists: 64 x 2 x 781 = 99,968
