"""A refusal for the context window is told apart from every other engine failure, from our server and vLLM's."""

from __future__ import annotations

import pytest

from policies.sampling import ContextExceeded, EngineError, SamplingParams, check_request, context_exceeded


def test_check_request_raises_context_exceeded_with_its_sizes():
    with pytest.raises(ContextExceeded) as caught:
        check_request([1] * 100, SamplingParams(max_tokens=50), vocab_size=256, context_length=128)
    assert (caught.value.prompt_tokens, caught.value.max_tokens, caught.value.context_length) == (100, 50, 128)
    assert isinstance(caught.value, EngineError)  # callers that know no better still see an engine failure
    with pytest.raises(EngineError) as other:
        check_request([999], SamplingParams(max_tokens=1), vocab_size=256, context_length=128)
    assert not isinstance(other.value, ContextExceeded)


@pytest.mark.parametrize(
    "message, sizes",
    [
        ('{"error": "prompt of 3716 tokens + max_tokens=192 exceeds the context of 2048 tokens"}', (3716, 192, 2048)),
        (
            "This model's maximum context length is 2048 tokens. However, you requested 3716 tokens "
            "(3524 in the messages, 192 in the completion). Please reduce the length of the messages or completion.",
            (3524, 192, 2048),
        ),
        ("a token id outside the vocabulary", None),
        ("prompt of x tokens + max_tokens=1 exceeds the context of 5 tokens", None),
        ("9" * 100_000, None),
    ],
)
def test_a_servers_refusal_is_read_back(message, sizes):
    found = context_exceeded(message)
    assert (None if found is None else (found.prompt_tokens, found.max_tokens, found.context_length)) == sizes
