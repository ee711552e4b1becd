"""The server's bounded parser (policies/request_bounds.py), its request models' bounds (policies/protocol.py), its
memory estimates and admission (policies/admission.py), on hand values; and the gym's largest request inside every
default bound with room. The attacks on a real server: tests/integration/test_server_bounds.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from pydantic import ValidationError

from gym.policy_client import HttpEngine
from policies.admission import (
    Admission,
    ModelShape,
    Refused,
    completion_bytes,
    forward_bytes,
    parse_bytes,
)
from policies.continuous import _Sequence
from policies.protocol import MAX_STOP_TOKEN_IDS, ChatCompletionRequest, CompletionRequest
from policies.request_bounds import BodyRefused, JsonBounds, measure, parse
from policies.sampling import SamplingParams
from policies.serve_config import ServerOptions

ROOT = Path(__file__).resolve().parents[2]
DEFAULTS = ServerOptions()
BOUNDS = JsonBounds(
    max_values=DEFAULTS.max_json_values,
    max_depth=DEFAULTS.max_json_depth,
    max_string_bytes=DEFAULTS.max_json_string_bytes,
    max_number_chars=DEFAULTS.max_json_number_chars,
    max_object_members=DEFAULTS.max_json_object_members,
)
SMALL = JsonBounds(max_values=10, max_depth=3, max_string_bytes=8, max_number_chars=5, max_object_members=3)


def _refused(body: bytes, bounds: JsonBounds = SMALL) -> BodyRefused:
    with pytest.raises(BodyRefused) as caught:
        parse(body, bounds)
    return caught.value


# ------------------------------------------------------------------ the shape of a body, in its bytes


def test_values_and_depth_are_counted_outside_strings_only():
    shape = measure(b'{"a": [1, 2, [3]], "b": "x, [y], {z}, 12345678"}', BOUNDS)
    assert shape.values == 7 and shape.depth == 3 and shape.strings == 3 and shape.longest_number == 1
    assert shape.longest_string == len("x, [y], {z}, 12345678")


@pytest.mark.parametrize(
    "body, values, longest",
    [
        (rb'["a\"b", 1]', 3, 4),  # an escaped quote stays inside its string
        (rb'["a\\", 1]', 3, 3),  # an escaped backslash, then the closing quote
        (rb'["a\\\"", [1, 2]]', 5, 5),  # backslash, then an escaped quote
        (rb'["\\\\", "\"", "x"]', 4, 4),
    ],
)
def test_escaped_quotes_are_told_from_closing_ones(body, values, longest):
    """Values: the commas and openers outside strings, + 1 (the array and its items)."""
    assert json.loads(body)  # the hand values are valid JSON
    shape = measure(body, BOUNDS)
    assert (shape.values, shape.longest_string) == (values, longest)


@pytest.mark.parametrize(
    "body, status, words",
    [
        (b"[" + b"1," * 10 + b"1]", 413, "max_json_values"),
        (b"[[[[1]]]]", 400, "max_json_depth"),
        (b'["123456789"]', 413, "max_json_string_bytes"),
        (b"[123456]", 400, "max_json_number_chars"),
        (b'{"a": 1, "b": 2, "c": 3, "d": 4}', 400, "max_json_object_members"),
        (b'{"a": 1, "a": 2}', 400, "given twice"),
        (b'{"a": NaN}', 400, "not a JSON value"),
        (b'["abc', 400, "not closed"),
        (b'["caf\xe9"]', 400, "not UTF-8"),
        ('["x"]'.encode("utf-16"), 400, "not UTF-8"),
        (b'"' * 21, 413, "quote characters"),
    ],
)
def test_each_bound_refuses_with_its_status_and_name(body, status, words):
    refused = _refused(body)
    assert refused.status == status and words in str(refused), str(refused)


def test_digits_inside_strings_are_no_number_and_within_bounds_parses():
    value, shape = parse(b'{"a": "1234567", "b": [1, 2.5]}', SMALL)
    assert value == {"a": "1234567", "b": [1, 2.5]} and shape.longest_number == 3


def test_a_deep_body_is_refused_without_counting_all_of_it():
    deep = b"[" * 200_000 + b"]" * 200_000
    refused = _refused(deep, BOUNDS)
    assert refused.status == 400 and "max_json_depth" in str(refused)


# ------------------------------------------------------------------ the request models' bounds


@pytest.mark.parametrize(
    "prompt, kind",
    [([1, 2], list), ([[1], [2, 3]], list), ("hi", str), (["a", "b"], list)],
)
def test_the_prompt_is_read_by_the_shape_of_its_first_item(prompt, kind):
    assert isinstance(CompletionRequest.model_validate({"prompt": prompt}).prompt, kind)


@pytest.mark.parametrize(
    "body, words",
    [
        ({"prompt": [True] * 100_000}, "item 0: True is not a token id"),
        ({"prompt": [[1]] * 10 + [[-1]] * 100_000}, "item 0: -1 is not a token id"),
        ({"prompt": [1], "stop_token_ids": [0] * (MAX_STOP_TOKEN_IDS + 1)}, "1025 token ids"),
        ({"prompt": [1], "user": "u" * 5000}, "user"),
        ({"prompt": [1], "max_tokens": 1 << 40}, "max_tokens"),
    ],
)
def test_a_list_is_refused_with_one_error_at_its_first_bad_item(body, words):
    with pytest.raises(ValidationError) as caught:
        CompletionRequest.model_validate(body)
    assert caught.value.error_count() == 1 and words in str(caught.value), str(caught.value)[:500]


def test_many_bad_messages_are_one_error():
    with pytest.raises(ValidationError) as caught:
        ChatCompletionRequest.model_validate({"messages": [{"role": "nobody", "content": ""}] * 10_000})
    assert caught.value.error_count() == 1


def test_the_engine_checks_a_stop_token_against_a_set():
    params = SamplingParams(max_tokens=4, stop_token_ids=tuple(range(1000, 2000)))
    row = _Sequence(job=None, index=0, prompt=[1], params=params, draws=None)  # type: ignore[arg-type]
    assert isinstance(row.stops, frozenset) and row.stops == set(range(1000, 2000))


# ------------------------------------------------------------------ estimates and admission


TINY = ModelShape(  # configs/policy_tiny.yaml
    layers=3,
    hidden=64,
    intermediate=128,
    kv_width=32,
    moe_layers=2,
    experts_per_token=2,
    expert_intermediate=32,
    experts=8,
    dtype_bytes=4,
)


def test_the_continuous_engine_pays_one_prefill_a_prompt_the_batch_engine_one_a_row():
    continuous = completion_bytes(TINY, [100, 1000], n=8, max_tokens=16, routes=False, continuous=True)
    batch = completion_bytes(TINY, [100, 1000], n=8, max_tokens=16, routes=False, continuous=False)
    prefills = forward_bytes(TINY, 100) + forward_bytes(TINY, 1000)
    assert continuous - prefills == completion_bytes(None, [100, 1000], 8, 16, False, True)
    assert batch > 16 * forward_bytes(TINY, 1000)  # every row padded to the longest prompt
    routed = completion_bytes(TINY, [100], n=1, max_tokens=16, routes=True, continuous=True)
    assert routed > completion_bytes(TINY, [100], n=1, max_tokens=16, routes=False, continuous=True)


def test_a_prefill_costs_no_more_than_estimated():
    """The tiny policy's prefill of one 2048-token prompt, measured by the process's peak RSS, is within
    `forward_bytes` (measured 25 MiB against 55 MiB estimated; 105 against 168 at 4000 tokens)."""
    from policies.config import MoEArchitecture
    from policies.modeling import RdepMoeConfig, RdepMoeForCausalLM

    architecture = yaml.safe_load((ROOT / "configs/policy_tiny.yaml").read_text())["policy"]["model"]
    model = RdepMoeForCausalLM(RdepMoeConfig.from_architecture(MoEArchitecture(**architecture))).eval()
    assert ModelShape.of(model) == TINY
    ids = torch.full((1, 2048), 5)
    model(input_ids=ids[:, :8], logits_to_keep=1)  # first-call allocations are not the prefill's
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")
    before = _kib("VmRSS")
    with torch.no_grad():
        model(input_ids=ids, attention_mask=torch.ones_like(ids), logits_to_keep=1)
    measured = (_kib("VmHWM") - before) * 1024
    assert measured <= forward_bytes(TINY, 2048), (measured >> 20, forward_bytes(TINY, 2048) >> 20)


def _kib(key: str) -> int:
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(key + ":"))


def test_a_hold_is_refused_past_its_own_bound_then_past_the_total():
    admission = Admission(max_requests=2, request_bytes=100, total_bytes=150)
    with admission.hold() as first:
        first.add(80, "one")
        with pytest.raises(Refused) as too_large:
            first.add(30, "two")
        assert too_large.value.status == 413 and "max_request_memory_bytes" in str(too_large.value)
        second = admission.hold()
        with pytest.raises(Refused) as busy:
            second.add(80, "three")
        assert busy.value.status == 503 and "max_inflight_memory_bytes" in str(busy.value)
        second.add(500, "an upload", (1000, "max_body_bytes"), always=True)  # never refused for load
        assert admission.reserved == 580
        second.release()
    assert admission.reserved == 0 and admission.counts()["refused_too_large"] == 1


def test_admitted_requests_are_counted_and_given_back_on_failure():
    admission = Admission(max_requests=1, request_bytes=100, total_bytes=100)
    with pytest.raises(RuntimeError), admission.hold() as hold:
        hold.admit()
        with pytest.raises(Refused) as full:
            admission.hold().admit()
        assert full.value.status == 503 and "already queued" in str(full.value)
        raise RuntimeError("the engine failed")
    assert admission.admitted == 0
    admission.hold().admit()


def test_budgets_must_let_a_request_in():
    with pytest.raises(ValidationError, match="could never be admitted"):
        ServerOptions(max_request_memory_bytes=2 << 30, max_inflight_memory_bytes=1 << 30)


# ------------------------------------------------------------------ honest requests fit with room


def _largest(key: str) -> int:
    found = []

    def walk(node) -> None:
        if isinstance(node, dict):
            for name, value in node.items():
                found.append(value) if name == key and isinstance(value, int) else walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for path in (ROOT / "configs").glob("*.yaml"):
        walk(yaml.safe_load(path.read_text()))
    return max(found)


def test_the_largest_request_the_gym_sends_is_within_every_bound_with_room():
    """`HttpEngine`'s body for one prompt of the largest `episode.max_total_tokens` of any shipped config (32768),
    6-digit token ids (a 200k vocabulary), Harmony's 3 stop ids, the largest seed and a long float: every bound
    at least 4x above it."""
    context = _largest("max_total_tokens")
    assert context >= 32768
    params = SamplingParams(
        max_tokens=_largest("max_tokens_per_turn"), temperature=1 / 3, seed=(1 << 62) - 1, stop_token_ids=(199999,) * 3
    )
    body = json.dumps(HttpEngine("http://x").request_body([[199_999] * context], params)).encode()
    shape = measure(body, BOUNDS)
    assert len(body) * 4 <= DEFAULTS.max_json_body_bytes
    assert shape.values * 16 <= BOUNDS.max_values and shape.depth * 4 <= BOUNDS.max_depth
    assert shape.longest_number + 16 <= BOUNDS.max_number_chars and shape.longest_string == len("prompt") + 15
    assert CompletionRequest.model_validate(json.loads(body)).stop_token_ids == [199999] * 3
    parsed = parse_bytes(shape)
    assert parsed * 16 <= DEFAULTS.max_request_memory_bytes, parsed >> 20


def test_the_main_jobs_requests_cost_a_small_part_of_the_budget():
    """The main job (configs/cp_grpo_tiny.yaml: the tiny policy, 1024 tokens an episode, 192 a turn) sends one
    prompt a request: ~20 MiB estimated against 1 GiB; the tiny policy's largest single request (a prompt filling
    its 4096-token context) stays 4x below the budget, 64 of the main job's at once below the total."""
    job = yaml.safe_load((ROOT / "configs/cp_grpo_tiny.yaml").read_text())
    episode = job["environment"]["episode"]
    one = completion_bytes(TINY, [episode["max_total_tokens"]], 1, episode["max_tokens_per_turn"], True, True)
    assert one * 32 <= DEFAULTS.max_request_memory_bytes, one >> 20
    assert one * DEFAULTS.max_queued_requests <= DEFAULTS.max_inflight_memory_bytes
    full = completion_bytes(TINY, [4095], 1, 1, True, True)
    assert full * 4 <= DEFAULTS.max_request_memory_bytes, full >> 20
