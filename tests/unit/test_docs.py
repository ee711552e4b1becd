"""The README stays a front page, the docs stay documentation, and no page links to a file or heading that is not there.

Issue 43 item 3: the README is at most 120 lines and starts with the two set-up commands; `docs/` pages say how
things work in the present tense, so no page but the dated ones (`docs/log.md`, `docs/benchmarks.md`, where a
figure names the revision it ran at) holds a commit hash.
"""

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


def test_readme_is_at_most_120_lines():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 120, f"README.md has {len(lines)} lines: move detail to docs/ (figures to docs/benchmarks.md)"


def test_first_set_up_block_names_make_run_and_make_test():
    text = README.read_text(encoding="utf-8")
    heading = re.search(r"^## Set-up.*$", text, re.MULTILINE)
    assert heading, "README.md has no '## Set-up' section"
    block = re.search(r"^```\w*\n(.*?)^```", text[heading.end() :], re.MULTILINE | re.DOTALL)
    assert block, "the set-up section has no code block"
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    assert commands[:2] == ["make run", "make test"]
    assert "`make check`" in text, "the README names the edit loop, `make check`"


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


# A commit hash as the docs would write one: 7-40 lower-case hex characters, at least one digit and one letter,
# standing alone: not inside a longer word, a path, an image tag (`gym-runner:HEX`), a `sha256:` digest, a uuid
# or a `0x` literal. (A hash of digits only reads as a number and is not caught.)
COMMIT = re.compile(r"(?<![\w:/@+-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w/@+-])")
# Looks like one and is not: a container's short id after its name, as `gym gc` prints it.
CONTAINER_ID = re.compile(r"\bgym-[\w.-]+ \([0-9a-f]{12}\)")
DATED = {"docs/log.md", "docs/benchmarks.md"}


def commit_hashes(text: str) -> set[str]:
    return set(COMMIT.findall(CONTAINER_ID.sub("", text)))


@pytest.mark.parametrize(
    "page",
    [p for p in PAGES if str(p.relative_to(ROOT)) not in DATED],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_no_commit_hashes_outside_the_dated_pages(page: Path):
    name = str(page.relative_to(ROOT))
    found = commit_hashes(page.read_text(encoding="utf-8"))
    assert not found, (
        f"{name} names commits {sorted(found)}: say how it works now; a dated figure goes to docs/benchmarks.md, "
        "a history to docs/log.md"
    )


def test_commit_hash_check_can_fail():
    assert commit_hashes("since 5d8ee55, `--against 5cdbac1^`, at 7378d94..12aa782 (a94b62b)") == {
        "5d8ee55",
        "5cdbac1",
        "7378d94",
        "12aa782",
        "a94b62b",
    }
    not_commits = (
        "gym-runner:04ba5e2e3345b18a, sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08, "
        "0xdeadbeef1, 1000000007, decaffed, traceback, runs/abc1234/x, 123e4567-e89b-12d3-a456-426614174000, "
        "removed gym-ws-3f2a (8c1d2e3f4a5b): deadline passed"
    )
    assert commit_hashes(not_commits) == set()
