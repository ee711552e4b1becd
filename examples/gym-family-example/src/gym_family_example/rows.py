"""The ``letters`` row format: ``{"id": str, "word": str}``, a word of 1-40 lowercase letters."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tasks.errors import MalformedRow


class LettersTask(BaseModel):
    """Sort the letters of ``word`` alphabetically."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task_id: str = Field(min_length=1, max_length=256)
    word: str = Field(pattern=r"^[a-z]{1,40}$")

    @property
    def gold(self) -> str:
        return "".join(sorted(self.word))


def looks_like(row: dict[str, Any]) -> bool:
    return set(row) == {"id", "word"}


def parse(index: int, row: dict[str, Any], name: str) -> LettersTask:
    word, task_id = row.get("word"), row.get("id", str(index))
    if not isinstance(word, str) or not word.isascii() or not word.isalpha() or not word.islower() or len(word) > 40:
        raise MalformedRow("word: 1-40 lowercase ASCII letters")
    if not isinstance(task_id, str | int) or isinstance(task_id, bool):
        raise MalformedRow("id: a string or an integer")
    return LettersTask(task_id=str(task_id), word=word)
