"""Progress bars (gym/progress.py): drawn on a terminal's stderr only, and log lines never shred them."""

from __future__ import annotations

import io
import logging
import sys

from gym.progress import progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def logger_to(stream: io.StringIO) -> logging.Logger:
    root = logging.getLogger()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    root.addHandler(handler)
    return root


def test_a_bar_on_a_terminal_with_log_lines_on_their_own_lines(monkeypatch):
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    root = logger_to(terminal)
    level = root.level
    root.setLevel(logging.INFO)
    try:
        with progress(3, "rollout", "episode") as bar:
            assert not bar.disable
            for n in range(3):
                bar.update(1)
                logging.getLogger("gym.test").warning("episode %d masked", n)
        assert any(type(h) is logging.StreamHandler and h.stream is terminal for h in root.handlers)  # restored
    finally:
        root.handlers = [h for h in root.handlers if getattr(h, "stream", None) is not terminal]
        root.setLevel(level)
    text = terminal.getvalue()
    assert "rollout: 100%" in text and "3/3" in text
    lines = text.replace("\r", "\n").splitlines()
    for n in range(3):  # each record whole on a line of its own, not glued to a bar
        assert f"WARNING episode {n} masked" in lines


def test_no_bar_when_stderr_is_not_a_terminal_or_when_disabled(monkeypatch):
    piped = io.StringIO()
    monkeypatch.setattr(sys, "stderr", piped)
    with progress(2, "grade", "task") as bar:
        bar.update(2)
    assert bar.disable and piped.getvalue() == ""
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with progress(2, "warm start", "step", enabled=False) as bar:
        bar.update(2)
    assert bar.disable and terminal.getvalue() == ""
