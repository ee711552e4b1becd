"""`python -m gym show BUNDLE`: print a replay bundle as a readable transcript.

Header (task, environment, image, reward and its terms, seeds), then every
message in order (tool calls with pretty-printed arguments, tool results with
their failure kind, turns that did not parse with their decoded text and the
reason), then the answer and the per-test verdicts. Long texts are cut unless
``--full``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def configure(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    del argv
    parser.add_argument("bundle", type=Path, help="a bundle written by `python -m gym rollout`")
    parser.add_argument("--full", action="store_true", help="print long texts whole")


def _cut(text: str, full: bool, limit: int = 1500) -> str:
    if full or len(text) <= limit:
        return text
    return f"{text[:limit]}\n[... {len(text) - limit} more characters; --full shows them]"


def _header(message) -> str:
    if message.role == "tool":
        return f"{message.name} -> {message.recipient or 'assistant'}"
    if message.is_tool_call:
        return f"assistant -> {message.recipient} ({message.content_type or 'text'})"
    return f"{message.role}" + (f" [{message.channel}]" if message.channel else "")


def _body(message) -> str:
    if message.is_tool_call:
        try:
            return json.dumps(json.loads(message.content), indent=2, ensure_ascii=False)
        except ValueError:
            return message.content
    return message.content


def _parse_error_text(bundle, event) -> str:
    from gym.format.tokenizer import TokenizerError, load_tokenizer

    ids = bundle.trajectory.ids[event.start : event.end]
    try:
        tokenizer = load_tokenizer(bundle.tokenizer)
    except TokenizerError:
        return f"{len(ids)} token ids (tokenizer {bundle.tokenizer} unavailable)"
    if tokenizer.fingerprint != bundle.trajectory.tokenizer:
        return f"{len(ids)} token ids (tokenizer {bundle.tokenizer} is not the one the ids belong to)"
    return tokenizer.decode(ids)


def _kind(task) -> str:
    """``format, kind`` of a CP task; ``swe, owner/name`` of an SWE instance; ``math, form`` of a math task."""
    from tasks.families import kind_of

    return kind_of(task).describe(task)


def transcript(bundle, full: bool = False) -> str:
    """The readable transcript of a bundle."""
    t = bundle.trajectory
    lines = [
        f"task {bundle.task.task_id} ({_kind(bundle.task)})  environment {bundle.environment}",
        f"image {bundle.image} {bundle.image_digest or '(digest unknown)'}  bundled: {bundle.reason}",
        f"reward {t.reward}  {' '.join(f'{k}={v:+.3f}' for k, v in t.reward_breakdown.items())}",
        f"masked {t.masked}  end {t.end_reason}  turns {bundle.turns}  tool calls {len(bundle.tool_calls)}  "
        f"policy version {t.policy_version}  group {t.group_id}",
        f"tokens {len(t.ids)} (prompt {len(t.prompt_ids)}, sampled {t.num_sampled})  seeds {t.seeds}",
        f"failures {[f.value for f in t.failures] or 'none'}",
    ]
    results = [e for e in t.events if e.kind == "result"]
    errors = [e for e in t.events if e.kind == "parse_error"]
    seen_results = 0

    def flush_errors(before: int | None) -> None:
        while errors and (before is None or errors[0].start < before):
            event = errors.pop(0)
            lines.append(f"\n--- assistant: NOT A VALID {t.chat_format.upper()} TURN ({event.detail}) ---")
            lines.append(_cut(_parse_error_text(bundle, event), full))

    for message in t.messages:
        if message.role == "tool":
            event = results[seen_results] if seen_results < len(results) else None
            if event is not None:
                flush_errors(event.start)
            seen_results += 1
            failure = f" [{event.failure.value}]" if event is not None and event.failure is not None else ""
            lines.append(f"\n--- {_header(message)}{failure} ---")
        else:
            lines.append(f"\n--- {_header(message)} ---")
        lines.append(_cut(_body(message), full))
    flush_errors(None)
    lines.append(f"\n=== answer ({bundle.answer_source or 'none'}) ===")
    lines.append(_cut(bundle.answer, full) if bundle.answer is not None else "(nothing submitted)")
    grading = bundle.grading
    if grading is not None:
        passed = sum(test.verdict == "passed" for test in grading.tests)
        tampered = any(test.verdict == "tampered" for test in grading.tests)
        lines.append(
            f"\n=== grading: {passed}/{len(grading.tests)} tests passed"
            f"{' (INFRA ERROR)' if grading.infra_error else ''}{' (TAMPERED)' if tampered else ''} ==="
        )
        if tampered:  # why: the tamper scan's findings or what the harness's record contradicts
            lines.append(_cut(grading.detail, full))
        for test in grading.tests:
            lines.append(
                f"test {test.index}: {getattr(test.verdict, 'value', test.verdict)}"
                + (f"  {test.detail}" if test.detail else "")
            )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from gym.bundle import read_bundle

    print(transcript(read_bundle(args.bundle), args.full))
    return 0
