"""`gym replay` against tampered bundles, in real containers, beside the honest control: the honest bundle of a
real episode replays identically; the same bundle naming another Docker engine (a listener this test owns)
replays identically on this machine's engine and that engine is never dialed; bundles asking for more than the
hardened defaults, or malformed ones, end `gym replay` with one line and exit 5, never a traceback
(gym/replay_limits.py; the in-process attacks are tests/unit/test_attacks_replay.py)."""

from __future__ import annotations

import json
import socket
import threading

import pytest

from gym import bundle as bundles
from tests.replay_support import ROOT, TASK, gym, honest  # noqa: F401  (honest: a fixture)

pytestmark = [pytest.mark.docker, pytest.mark.slow]


class Listener:
    """A TCP port on loopback that counts who connects (the engine a tampered bundle names)."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.socket.settimeout(0.2)
        self.port = self.socket.getsockname()[1]
        self.connections = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.socket.accept()
            except TimeoutError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.socket.close()


def test_honest_bundle_replays_identically_and_a_bundle_naming_an_engine_never_dials_it(honest, tmp_path):  # noqa: F811
    listener = Listener()
    try:
        tampered = json.loads(json.dumps(honest))
        tampered["sandbox"]["engines"] = [
            {"url": f"tcp://127.0.0.1:{listener.port}", "capacity": 4, "allow_insecure_tcp": True}
        ]
        (tmp_path / "honest.json").write_text(json.dumps(honest))
        (tmp_path / "engines.json").write_text(json.dumps(tampered))
        done = gym("replay", str(tmp_path / "honest.json"), str(tmp_path / "engines.json"))
    finally:
        listener.close()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "2/2 bundles replayed identically" in done.stdout
    assert "note: sandbox.engines = " in done.stdout and "not used" in done.stdout, done.stdout[-2000:]
    assert listener.connections == 0  # the bundle's engine was never dialed


def _edit(data: dict, edit) -> dict:
    data = json.loads(json.dumps(data))
    edit(data)
    return data


TAMPERED = {
    "cpus null, memory 12288": (
        lambda d: d["sandbox"]["budgets"].update(cpus=None, memory_mb=12288),
        "sandbox.budgets.memory_mb = 12288",
    ),
    "pids and timeouts loosened": (
        lambda d: (d["sandbox"]["budgets"].update(pids=None), d["sandbox"]["calls"].update(timeout_s=3600)),
        "sandbox.budgets.pids = None",
    ),
    "host math check 1e9 s, huge memory": (
        lambda d: d.update(math={"timeout_s": 1e9, "memory_mb": 1 << 30}),
        "math.timeout_s = 1000000000.0",
    ),
    "truncated tool arguments": (
        lambda d: d["tool_calls"][1].update(arguments='{"command": "python3 solution.py'),
        "tool_calls.1.arguments: arguments are not valid JSON",
    ),
    "5,000-digit integer in tool arguments": (
        lambda d: d["tool_calls"][1].update(arguments='{"command": "ls", "timeout": ' + "9" * 5000 + "}"),
        "tool_calls.1.arguments: arguments hold an integer of more than 4,300 digits",
    ),
    "wrong type": (
        lambda d: d["sandbox"]["budgets"].update(memory_mb={"a": 1}),
        "sandbox.budgets.memory_mb",
    ),
}


@pytest.mark.parametrize("name", list(TAMPERED))
def test_tampered_bundles_end_replay_in_one_line_with_exit_5(honest, tmp_path, name):  # noqa: F811
    edit, named = TAMPERED[name]
    path = tmp_path / "tampered.json"
    path.write_text(json.dumps(_edit(honest, edit)))
    done = gym("replay", str(path))
    assert done.returncode == 5, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gym: error: ") and named in lines[0], done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "bundles replayed" not in done.stdout


def test_deep_nesting_and_a_huge_file_end_replay_in_one_line(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text('{"kind": "selfplay_chain", "row": ' + "[" * 200000 + "]" * 200000 + "}")
    huge = tmp_path / "huge.json"
    with huge.open("wb") as out:
        out.write(b'{"kind": "selfplay_chain", "environment": "')
        out.truncate(getattr(bundles, "MAX_BUNDLE_BYTES", 64 << 20) + 1)
    for path, said in ((deep, "recursion limit"), (huge, "larger than a bundle may be")):
        done = gym("replay", str(path), timeout=120)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 5 and len(lines) == 1 and said in lines[0], done.stderr[-2000:]
