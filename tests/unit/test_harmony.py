"""Harmony rendering (exact text of the canonical forms) and strict parsing of sampled turns."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gym.format.harmony import Harmony, ParsedTurn, ParseError
from gym.format.message import Message, ToolCall
from gym.format.prompt import SystemPrompt, ToolSpec, developer_message, render_tools, system_message, typescript_type
from gym.format.tokenizer import Tokenizer, load_tokenizer
from sandbox.failure import FailureKind


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return load_tokenizer("bpe")


@pytest.fixture(scope="module")
def harmony(tok: Tokenizer) -> Harmony:
    return Harmony(tok)


def sample(harmony: Harmony, *pieces: str | int) -> list[int]:
    """Token ids as a policy might sample them: str pieces as text, ints as special ids."""
    ids: list[int] = []
    for piece in pieces:
        ids += harmony.tokenizer.encode(piece) if isinstance(piece, str) else [piece]
    return ids


# -- rendering ---------------------------------------------------------------------


def test_canonical_forms(harmony: Harmony, tok: Tokenizer) -> None:
    call = Message.tool_call("python", {"code": "print(1)"})
    result = Message.tool_result("python", "1\n")
    answer = Message.assistant("final", "1")
    assert tok.decode(harmony.render([call])) == (
        '<|start|>assistant<|channel|>commentary to=functions.python <|constrain|>json<|message|>{"code":"print(1)"}<|call|>'
    )
    assert tok.decode(harmony.render([result])) == (
        "<|start|>functions.python to=assistant<|channel|>commentary<|message|>1\n<|end|>"
    )
    assert tok.decode(harmony.render([answer])) == "<|start|>assistant<|channel|>final<|message|>1<|return|>"
    # A final answer followed by more messages (history) ends with <|end|>.
    assert tok.decode(harmony.render([answer, Message.user("again")])).startswith(
        "<|start|>assistant<|channel|>final<|message|>1<|end|><|start|>user"
    )
    assert (
        tok.decode(harmony.render_prompt([Message.user("hi")])) == "<|start|>user<|message|>hi<|end|><|start|>assistant"
    )
    assert tok.decode(harmony.stop_ids()) == "<|call|><|return|>"


def test_specials_are_single_ids_in_the_rendering(harmony: Harmony, tok: Tokenizer) -> None:
    ids = harmony.render([Message.tool_call("bash", {"command": "ls"})])
    for name in ("start", "channel", "constrain", "message", "call"):
        assert ids.count(tok.special(name)) == 1


def test_tool_schemas_render_as_a_typescript_namespace() -> None:
    tool = ToolSpec(
        name="python",
        description="Run Python code.",
        parameters={
            "type": "object",
            "properties": {
                "code": {"type": "string", "description": "The code to run."},
                "timeout": {"type": "integer", "default": 10},
                "mode": {"type": "string", "enum": ["fast", "safe"]},
                "files": {"type": "array", "items": {"type": "string"}},
                "env": {"type": ["string", "null"]},
            },
            "required": ["code"],
        },
    )
    assert render_tools([tool, ToolSpec(name="list_dir", description="List a directory.")]) == (
        "# Tools\n\n## functions\n\nnamespace functions {\n\n"
        "// Run Python code.\n"
        "type python = (_: {\n"
        "// The code to run.\n"
        "code: string,\n"
        "timeout?: number, // default: 10\n"
        'mode?: "fast" | "safe",\n'
        "files?: string[],\n"
        "env?: string | null,\n"
        "}) => any;\n\n"
        "// List a directory.\n"
        "type list_dir = () => any;\n\n"
        "} // namespace functions"
    )
    developer = developer_message("Solve the task.", [tool])
    assert developer.role == "developer"
    assert developer.content.startswith("# Instructions\n\nSolve the task.\n\n# Tools\n")
    assert typescript_type({"oneOf": [{"type": "integer"}, {"type": "boolean"}]}) == "number | boolean"


def test_system_message_names_channels() -> None:
    text = system_message(SystemPrompt(reasoning="high", knowledge_cutoff="2024-06")).content
    assert "Knowledge cutoff: 2024-06" in text and "Reasoning: high" in text
    assert "# Valid channels: analysis, commentary, final." in text
    assert "commentary channel: 'functions'" in text
    assert "functions" not in system_message(has_tools=False).content


# -- strict parsing ------------------------------------------------------------------


def test_valid_multi_message_turn(harmony: Harmony) -> None:
    s = harmony.ids
    ids = sample(
        harmony,
        s["channel"],
        "analysis",
        s["message"],
        "think",
        s["end"],
        s["start"],
        "assistant",
        s["channel"],
        "commentary to=functions.python ",
        s["constrain"],
        "json",
        s["message"],
        '{"code": "print(2)"}',
        s["call"],
    )
    turn = harmony.parse_completion(ids)
    assert isinstance(turn, ParsedTurn)
    assert [m.channel for m in turn.messages] == ["analysis", "commentary"]
    assert turn.tool_call == ToolCall(
        namespace="functions", name="python", arguments={"code": "print(2)"}, raw='{"code": "print(2)"}'
    )
    assert turn.stop == "call" and turn.spans[-1][1] == len(ids)
    assert turn.canonical  # sampled exactly as the renderer encodes these pieces (the raw JSON is kept as is)


@pytest.mark.parametrize(
    ("pieces", "reason", "span"),
    [
        ([], "empty completion", (0, 1)),
        (["channel", "analysis", "message", "unfinished"], "truncated message", None),
        (["channel", "analysis"], "truncated header", None),
        (["channel", "thinking", "message", "x", "end"], "unknown channel 'thinking'", None),
        (["message", "x", "end"], "missing <|channel|>", None),
        (["channel", "final", "message", "x", "end"], "a final answer cannot end with <|end|>", "last"),
        (["channel", "analysis", "message", "x", "return"], "cannot end with <|return|>", "last"),
        (["channel", "analysis", "message", "x", "call"], "cannot end with <|call|>", "last"),
        (
            ["channel", "commentary to=functions.python ", "constrain", "json", "message", "{}", "end"],
            "a tool call cannot end with <|end|>",
            "last",
        ),
        (
            ["channel", "commentary to=functions.python ", "constrain", "json", "message", "print(1)", "call"],
            "tool call: arguments are not valid JSON",
            None,
        ),
        (
            ["channel", "commentary to=functions.python ", "constrain", "json", "message", "[1, 2]", "call"],
            "must be a JSON object",
            None,
        ),
        (
            ["channel", "analysis to=functions.python ", "message", "{}", "call"],
            "tool calls go to the commentary channel",
            None,
        ),
        (
            ["channel", "analysis", "message", "a", "channel", "b", "end"],
            "unexpected <|channel|> in message body",
            "special",
        ),
        (
            ["channel", "analysis", "channel", "message", "x", "end"],
            "unexpected <|channel|> in message header",
            "special",
        ),
        (["channel", "final", "message", "x", "return", "start"], "tokens after <|return|>", "last"),
        (
            ["channel", "analysis", "message", "x", "end", "channel", "final"],
            "expected <|start|>, got <|channel|>",
            "special",
        ),
        (
            ["channel", "analysis", "message", "x", "end", "start", "user", "message", "hi", "end"],
            "may only write assistant messages",
            None,
        ),
        (
            ["start", "assistant", "channel", "final", "message", "x", "return"],
            "unexpected <|start|> in message header",
            (0, 1),
        ),
        ([" to=", "channel", "commentary", "message", "{}", "call"], "invalid message", None),  # empty recipient
    ],
)
def test_invalid_turns_are_parse_errors_with_spans(
    harmony: Harmony, pieces: list[str], reason: str, span: object
) -> None:
    specials = {"channel", "message", "end", "return", "call", "constrain", "start"}
    ids = sample(harmony, *[harmony.ids[p] if p in specials else p for p in pieces])
    error = harmony.parse_completion(ids)
    assert isinstance(error, ParseError), error
    assert reason in error.reason
    assert error.failure is FailureKind.PARSE_ERROR
    assert 0 <= error.start < error.end <= max(len(ids), 1)
    if span == "last":
        assert error.end == len(ids) or error.start == len(ids) - 1
    elif span == "special":
        assert error.end - error.start == 1 and harmony.tokenizer.is_special(ids[error.start])
    elif isinstance(span, tuple):
        assert (error.start, error.end) == span


def test_out_of_vocabulary_id_is_a_parse_error(harmony: Harmony) -> None:
    error = harmony.parse_completion([harmony.ids["channel"], harmony.tokenizer.vocab_size + 5])
    assert isinstance(error, ParseError) and (error.start, error.end) == (1, 2)


def test_recipient_in_role_section_parses_but_is_not_canonical(harmony: Harmony) -> None:
    s = harmony.ids
    ids = sample(
        harmony,
        " to=functions.bash",
        s["channel"],
        "commentary ",
        s["constrain"],
        "json",
        s["message"],
        '{"command":"ls"}',
        s["call"],
    )
    turn = harmony.parse_completion(ids)
    assert isinstance(turn, ParsedTurn) and turn.tool_call is not None and turn.tool_call.name == "bash"
    assert not turn.canonical
    assert harmony.render_completion(turn.messages) != ids


def test_non_canonical_merges_parse_to_the_same_message(harmony: Harmony, tok: Tokenizer) -> None:
    canonical = harmony.render_completion([Message.assistant("final", "hello world")])
    body = [tid for ch in "hello world" for tid in tok.encode(ch)]  # one token per character
    split = canonical[: canonical.index(harmony.ids["message"]) + 1] + body + [harmony.ids["return"]]
    assert split != canonical
    turn = harmony.parse_completion(split)
    assert isinstance(turn, ParsedTurn) and turn.final == "hello world" and not turn.canonical


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_parser_never_raises_on_arbitrary_ids(harmony: Harmony, data: st.DataObject) -> None:
    specials = list(harmony.ids.values())
    token = st.one_of(
        st.sampled_from(specials), st.integers(0, harmony.tokenizer.vocab_size - 1), st.integers(-3, 10**6)
    )
    ids = data.draw(st.lists(token, max_size=40))
    result = harmony.parse_completion(ids)
    assert isinstance(result, (ParsedTurn, ParseError))
    conversation = harmony.parse_conversation(ids)
    assert isinstance(conversation, (list, ParseError))


def test_message_rejects_headers_that_could_not_round_trip() -> None:
    with pytest.raises(ValueError):
        Message(role="assistant", channel="commentary", recipient="functions.py thon", content="{}")
    with pytest.raises(ValueError):
        Message(role="tool", content="no name")
    with pytest.raises(ValueError):
        Message(role="assistant", channel="final", recipient="functions.python", content="{}")


@pytest.mark.parametrize("depth", [40, 1000, 20000])
def test_deeply_nested_arguments_are_a_parse_error_not_a_crash(harmony: Harmony, depth: int) -> None:
    """A sampled turn of nested brackets (1015 bpe tokens reach Python's recursion limit) is data."""
    nested = '{"code": ' + "[" * depth + "]" * depth + "}"
    call = Message.tool_call("python", {"code": "x"}).model_copy(update={"content": nested})
    turn = harmony.parse_completion(harmony.render_completion([call]))
    assert isinstance(turn, ParseError) and "nested" in turn.reason, turn
    shallow = Message.tool_call("python", {"code": "x"}).model_copy(update={"content": '{"code": [[["x"]]]}'})
    assert isinstance(harmony.parse_completion(harmony.render_completion([shallow])), ParsedTurn)
