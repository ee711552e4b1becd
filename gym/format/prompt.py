"""System and developer messages, with tool schemas rendered in as the Harmony spec shows.

Tools are described to the model as a TypeScript-like namespace in the
developer message, converted from each tool's JSON schema::

    # Tools

    ## functions

    namespace functions {

    // Run Python code in the workspace.
    type python = (_: {
    // The code to run.
    code: string,
    timeout?: number, // default: 10
    }) => any;

    } // namespace functions

The system message names the valid channels and, when function tools exist,
that calls to them go to the commentary channel.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gym.format.message import Message


class ToolSpec(BaseModel):
    """A tool as the model sees it: name, description and JSON-schema parameters."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="Tool name, called as functions.NAME.")
    description: str = Field(description="One or more lines shown to the model as comments.")
    parameters: dict[str, Any] | None = Field(
        None, description="JSON schema of the arguments object; None: no arguments."
    )


class SystemPrompt(BaseModel):
    """The fields of the Harmony system message."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_identity: str = Field(
        "You are a careful software engineer solving programming tasks.", description="First line."
    )
    knowledge_cutoff: str | None = Field(None, description="e.g. '2024-06'; omitted when None.")
    current_date: str | None = Field(
        None, description="e.g. '2025-01-01'; omitted when None (keeps prompts reproducible)."
    )
    reasoning: Literal["low", "medium", "high"] = Field("medium", description="Reasoning effort line.")


def _default_comment(value: Any) -> str:
    return f" // default: {json.dumps(value, ensure_ascii=False)}"


def typescript_type(schema: dict[str, Any], indent: str = "") -> str:
    """TypeScript-like type of a JSON schema (objects, arrays, enums, unions, nullable); unknown -> any."""
    for key in ("oneOf", "anyOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return " | ".join(typescript_type(variant, indent) for variant in schema[key])
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return " | ".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"])
    kind = schema.get("type")
    if isinstance(kind, list):
        return " | ".join(typescript_type({**schema, "type": k}, indent) for k in kind)
    if kind == "object":
        text = _object_type(schema, indent)
    elif kind == "array":
        items = schema.get("items")
        text = f"{typescript_type(items, indent)}[]" if isinstance(items, dict) else "any[]"
        text = f"({text[:-2]})[]" if " | " in text[:-2] else text
    else:
        text = {"string": "string", "integer": "number", "number": "number", "boolean": "boolean", "null": "null"}.get(
            kind if isinstance(kind, str) else "", "any"
        )
    if schema.get("nullable") is True and "null" not in text:
        text += " | null"
    return text


def _object_type(schema: dict[str, Any], indent: str) -> str:
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not properties:
        return "object"
    required = set(schema.get("required", ()))
    lines = ["{"]
    for key, prop in properties.items():
        prop = prop if isinstance(prop, dict) else {}
        if isinstance(prop.get("description"), str):
            lines.extend(f"{indent}// {line}" for line in prop["description"].splitlines())
        optional = "" if key in required else "?"
        default = _default_comment(prop["default"]) if "default" in prop else ""
        lines.append(f"{indent}{key}{optional}: {typescript_type(prop, indent + '    ')},{default}")
    lines.append(f"{indent}}}")
    return "\n".join(lines)


def render_tools(tools: Sequence[ToolSpec], namespace: str = "functions") -> str:
    """The ``# Tools`` section for ``tools`` (empty string when there are none)."""
    if not tools:
        return ""
    parts = [f"# Tools\n\n## {namespace}\n\nnamespace {namespace} {{\n"]
    for tool in tools:
        comment = "\n".join(f"// {line}" for line in tool.description.splitlines())
        signature = f"(_: {typescript_type(tool.parameters)})" if tool.parameters else "()"
        parts.append(f"{comment}\ntype {tool.name} = {signature} => any;\n")
    parts.append(f"}} // namespace {namespace}")
    return "\n".join(parts)


def system_message(prompt: SystemPrompt = SystemPrompt(), *, has_tools: bool = True) -> Message:
    """The Harmony system message: identity, dates, reasoning effort and valid channels."""
    head = [prompt.model_identity]
    if prompt.knowledge_cutoff:
        head.append(f"Knowledge cutoff: {prompt.knowledge_cutoff}")
    if prompt.current_date:
        head.append(f"Current date: {prompt.current_date}")
    channels = "# Valid channels: analysis, commentary, final. Channel must be included for every message."
    if has_tools:
        channels += "\nCalls to these tools must go to the commentary channel: 'functions'."
    return Message.system("\n\n".join(["\n".join(head), f"Reasoning: {prompt.reasoning}", channels]))


def developer_message(instructions: str, tools: Sequence[ToolSpec] = ()) -> Message:
    """The developer message: ``# Instructions`` then the ``# Tools`` section."""
    sections = [f"# Instructions\n\n{instructions}"] if instructions else []
    if tools:
        sections.append(render_tools(tools))
    return Message.developer("\n\n".join(sections))
