"""Where the distribution's files are, from any working directory: shipped configs and samples, built files.

The packages (gym, sandbox, tasks, ...) sit side by side under one ``ROOT``: the repository root of a
checkout (run in place with `python -m gym`, or installed editable), or site-packages for an installed
wheel, which also holds the shipped ``configs/`` there (pyproject.toml). So the paths the docs and
the shipped configs use (``configs/cp_smoke.yaml``, ``tasks/samples/taco.jsonl``) are relative to
``ROOT`` as well as to a checkout's root: a relative path that does not exist under the working
directory falls back to ``ROOT`` (`resolve`), and `code-rl-gym train configs/cp_grpo_tiny.yaml` works
from anywhere. A file of the user's own always wins: the fallback is taken only when the cwd has none.

Built and downloaded files (the default tokenizer, the o200k vocabulary) go to a checkout's git-ignored
folders, or for a wheel to the user's cache (`built_dir`): never into site-packages.

It lives in the lowest layer because the one config reader (`sandbox.config_file`) uses it.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DISTRIBUTION = "code-rl-gym"


def checkout() -> Path | None:
    """The repository root when running from a checkout (plain or editable install), else None (a wheel)."""
    return ROOT if (ROOT / "pyproject.toml").is_file() else None


def resolve(path: str | Path) -> Path:
    """``path`` itself when it exists (or is absolute), else the shipped file at the same relative path if
    there is one, else ``path`` unchanged (so an error names what the user wrote)."""
    path = Path(path)
    if path.is_absolute() or path.exists():
        return path
    shipped = ROOT / path
    return shipped if shipped.exists() else path


def built_dir(checkout_folder: str, name: str) -> Path:
    """Folder ``name`` of built files: ``<checkout>/<checkout_folder>/<name>`` (git-ignored) in a checkout,
    ``$XDG_CACHE_HOME/code-rl-gym/<name>`` (default ``~/.cache``) for a wheel."""
    root = checkout()
    if root is not None:
        return root / checkout_folder / name
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / DISTRIBUTION / name
