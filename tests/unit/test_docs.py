"""The README stays a front page (issue 18 item 12) and no page links to a file or heading that is not there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = sorted([README, *(ROOT / "docs").glob("*.md")])

# [text](target): inline Markdown links; the target ends at whitespace or ")" (none of ours hold either).
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def relative_links(text: str) -> list[str]:
    """Link targets outside code blocks that point into the repository or the page (no scheme)."""
    prose = FENCE.sub("", text)
    return [t for t in LINK.findall(prose) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def test_readme_is_under_200_lines():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) < 200, f"README.md has {len(lines)} lines: move detail to docs/"


def test_first_set_up_block_names_make_run_and_make_test():
    text = README.read_text(encoding="utf-8")
    heading = re.search(r"^## Set-up.*$", text, re.MULTILINE)
    assert heading, "README.md has no '## Set-up' section"
    block = re.search(r"^```\w*\n(.*?)^```", text[heading.end() :], re.MULTILINE | re.DOTALL)
    assert block, "the set-up section has no code block"
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    assert commands[:2] == ["make run", "make test"]


def anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens, repeats numbered."""
    found: set[str] = set()
    counts: dict[str, int] = {}
    for heading in re.findall(r"^#+ (.*)$", FENCE.sub("", text), re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = counts.get(slug, 0)
        counts[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def resolves(page: Path, target: str) -> bool:
    """Whether ``target``, as linked from ``page``, names a file that exists (and a heading it holds)."""
    path, _, anchor = target.partition("#")
    file = page.parent / path if path else page
    if not file.exists():
        return False
    if not anchor or file.suffix != ".md":
        return True
    return anchor in anchors(file.read_text(encoding="utf-8"))


def dead_links(page: Path) -> list[str]:
    return [t for t in relative_links(page.read_text(encoding="utf-8")) if not resolves(page, t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path):
    dead = dead_links(page)
    assert not dead, f"{page.relative_to(ROOT)} links to missing files or headings: {dead}"


def test_link_check_can_fail(tmp_path: Path):
    assert relative_links("see [x](docs/nope.md#a) and [y](https://e.org) and [z](#here)") == [
        "docs/nope.md#a",
        "#here",
    ]
    assert relative_links("```\n[x](in/code.md)\n```\n") == []
    assert anchors("# The CLI: `python -m gym COMMAND`\n## Errors and exit codes\n## Errors and exit codes\n") >= {
        "the-cli-python--m-gym-command",
        "errors-and-exit-codes",
        "errors-and-exit-codes-1",
    }
    page = tmp_path / "page.md"
    page.write_text("# Here\n[ok](#here) [gone](#there) [missing](other.md) [self](page.md#here)\n")
    assert dead_links(page) == ["#there", "other.md"]
