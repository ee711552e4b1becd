"""Attacks on `gym replay` as an adversary who hands someone a bundle: every field that reaches the host or
loosens the sandbox is checked against the hardened defaults (gym/replay_limits.py), the engine is never the
bundle's, and a malformed bundle is a one-line `BundleError` before anything starts, never a traceback.

No Docker here: ``open_pool`` is replaced by a trap that records the configuration it was handed and stops the
replay, so a bundle that got past the checks is seen without a container starting. The real-Docker side (an
honest bundle replays identically; an engine the bundle names is never dialed) is
tests/integration/test_replay_attacks.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import gym.bundle
import gym.replay
from gym.bundle import Bundle, BundleError, bundle_of, read_bundle, write_bundle
from gym.replay import replay_files
from gym.scripted import load_scripted
from gym.selfplay.chain_bundle import is_chain_bundle, read_chain_bundle, replay_chain_files, write_chain_bundle
from tests import selfplay_support
from tests.fakes import codecontests_env, run_workers

chain_bundles = selfplay_support.chain_bundles  # the fixture: honest chain bundles, right and wrong


class Opened(Exception):
    """The trap: a pool was about to be opened with this configuration."""

    def __init__(self, config):
        super().__init__("a pool was opened")
        self.config = config


@pytest.fixture()
def trap(monkeypatch):
    def opened(config, **_):
        raise Opened(config)

    monkeypatch.setattr(gym.replay, "open_pool", opened)


@pytest.fixture(scope="module")
def honest() -> dict:
    """An honest episode bundle of the scripted reference (fake pool and grader), as JSON data."""
    env = codecontests_env()
    _, workers, _ = run_workers(env, load_scripted("reference", env), groups=1, group_size=1)
    return json.loads(bundle_of(env, workers.results[0], "sampled", "sha256:x").model_dump_json())


DIGITS = "<5,000 digits>"  # written as a 5,000-digit JSON integer (Python's int() refuses more than 4,300)


def _write(tmp_path: Path, data: dict, name: str = "b.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data).replace(json.dumps(DIGITS), "9" * 5000))
    return path


def _edit(data: dict, field: str, value) -> dict:
    data = json.loads(json.dumps(data))
    *parents, last = field.split(".")
    here = data
    for part in parents:
        here = here[part]
    here[last] = value
    return data


def _opened_config(path: Path):
    with pytest.raises(Opened) as caught:
        replay_files([path])
    return caught.value.config


def test_an_honest_bundle_passes_every_check_and_reaches_the_pool_unchanged(honest, tmp_path, trap):
    """The control: nothing in an honest bundle is refused; the pool gets the recorded sandbox."""
    path = _write(tmp_path, honest)
    config = _opened_config(path)
    assert config == read_bundle(path).sandbox


LOOSENED = [
    ("sandbox.budgets.cpus", None),
    ("sandbox.budgets.memory_mb", 12288),
    ("sandbox.budgets.memory_mb", 10**30),
    ("sandbox.budgets.pids", None),
    ("sandbox.budgets.pids", 100000),
    ("sandbox.budgets.nofile", 1 << 20),
    ("sandbox.calls.timeout_s", 3600.0),
    ("sandbox.calls.grace_s", 1e9),
    ("sandbox.calls.output_limit_bytes", 64 << 20),
    ("sandbox.episode.wall_s", 1e9),
    ("sandbox.episode.max_calls", 100000),
    ("sandbox.hardening.network", "bridge"),
    ("sandbox.hardening.seccomp", "unconfined"),
    ("sandbox.hardening.read_only_rootfs", False),
    ("sandbox.pool.ttl_s", 1e12),
    ("sandbox.allowlist", ["/"]),
    ("sandbox.workdir", "/etc"),
    ("sandbox.image", "registry.invalid:5000/evil/runner:1"),
    ("image", "registry.invalid/evil:latest"),
    ("tools.max_timeout_s", 1e9),
    ("tools.read_bytes", 64 << 20),
    ("grader.max_time_s", 1e9),
    ("grader.output_limit_bytes", 64 << 20),
    ("grader.concurrency", 64),
    ("math", {"timeout_s": 1e9}),
    ("math", {"memory_mb": 1 << 30}),
    ("math", {"start_timeout_s": 1e9, "concurrency": 1000}),
    ("swe", {"budgets": {"memory_mb": 65536, "workspace_mb": 1024, "tmp_mb": 256, "pids": None}}),
    ("swe", {"grader": {"test_timeout_s": 1e9}}),
]


@pytest.mark.parametrize("field, value", LOOSENED, ids=[f"{f}={str(v)[:20]}" for f, v in LOOSENED])
def test_a_bundle_asking_for_more_than_the_hardened_defaults_is_refused_naming_the_field(
    honest, tmp_path, trap, field, value
):
    """Refused before any pool opens, in one line that names the field (the first nested one for a section)."""
    path = _write(tmp_path, _edit(honest, field, value))
    with pytest.raises(BundleError) as caught:
        replay_files([path])
    message = str(caught.value)
    named = field if not isinstance(value, dict) else field + "." + next(iter(value))
    assert "\n" not in message and str(path) in message and "refusing to replay" in message, message
    assert named.split(".")[0] in message and len(message) < 600, message
    if not isinstance(value, dict):
        assert field in message, message


@pytest.mark.parametrize("field", ["sandbox.budgets.memory_mb", "math.memory_mb", "turns"])
def test_a_5000_digit_integer_anywhere_is_a_one_line_error(honest, tmp_path, trap, field):
    data = _edit(honest, "math", {}) if field.startswith("math") else honest
    path = _write(tmp_path, _edit(data, field, DIGITS))
    with pytest.raises(BundleError) as caught:
        replay_files([path])
    assert "\n" not in str(caught.value) and "number out of range" in str(caught.value), str(caught.value)


def test_trust_lets_sandbox_side_fields_through_but_never_host_side_ones(honest, tmp_path, trap):
    """--trust-bundle-sandbox (a kill-test bundle you wrote) covers the sandbox's own limits, not the host's."""
    weak = _write(tmp_path, _edit(honest, "sandbox.budgets.cpus", None), "weak.json")
    assert _opened_config_trusted(weak).budgets.cpus is None
    host = _write(tmp_path, _edit(honest, "math", {"timeout_s": 1e9}), "host.json")
    with pytest.raises(BundleError, match="math.timeout_s"):
        replay_files([host], trust_sandbox=True)


def _opened_config_trusted(path: Path):
    with pytest.raises(Opened) as caught:
        replay_files([path], trust_sandbox=True)
    return caught.value.config


PLACES = [
    ("sandbox.engines", [{"url": "tcp://127.0.0.1:1", "capacity": 4, "allow_insecure_tcp": True}]),
    ("sandbox.engine", {"base_url": "ssh://builder@replay-host.invalid"}),
    ("sandbox.engine", {"base_url": "tcp://203.0.113.9:2375", "allow_insecure_tcp": True}),
    ("sandbox.engine", {"base_url": "unix:///tmp/evil.sock"}),
    ("sandbox.budgets.cpuset_cpus", "0-63"),
]


@pytest.mark.parametrize("field, value", PLACES, ids=[f for f, _ in PLACES])
def test_the_engine_is_never_the_bundles(honest, tmp_path, trap, field, value, monkeypatch):
    """Where a replay runs is the replaying user's (DOCKER_HOST, or the default socket): the pool is opened on
    that engine whatever the bundle names, even with --trust-bundle-sandbox."""
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    data = _edit(honest, field, value)
    if field == "sandbox.engines":
        data["sandbox"]["require_labels"] = []
    path = _write(tmp_path, data)
    for trust in (False, True):
        with pytest.raises(Opened) as caught:
            replay_files([path], trust_sandbox=trust)
        config = caught.value.config
        assert config.engines == [] and config.engine.base_url is None and config.engine.tls is None
        assert config.budgets.cpuset_cpus is None and not config.engine.allow_insecure_tcp


MALFORMED_ARGUMENTS = [
    '{"command": "echo hi"',  # truncated JSON
    '{"command": "echo", "timeout": ' + "1" * 5000 + "}",  # a 5,000-digit integer
    "[1, 2, 3]",  # not an object
    '"echo"',
    "[" * 100000 + "]" * 100000,  # nested past the interpreter's stack
    '{"a": ' + "[" * 50 + "]" * 50 + "}",  # deeper than any tool's arguments
    "",
]


@pytest.mark.parametrize("arguments", MALFORMED_ARGUMENTS, ids=lambda a: a[:20] or "empty")
def test_malformed_recorded_arguments_are_a_one_line_error_not_a_traceback(honest, tmp_path, trap, arguments):
    """A recorded episode never holds a call whose arguments did not parse (that turn is a parse error)."""
    data = json.loads(json.dumps(honest))
    data["tool_calls"][1]["arguments"] = arguments
    path = _write(tmp_path, data)
    with pytest.raises(BundleError) as caught:
        replay_files([path])
    message = str(caught.value)
    assert "\n" not in message and "tool_calls.1.arguments" in message and len(message) < 600, message


def test_a_bad_recipient_is_a_one_line_error(honest, tmp_path, trap):
    data = json.loads(json.dumps(honest))
    data["tool_calls"][0]["recipient"] = "python"  # no namespace
    with pytest.raises(BundleError, match="tool_calls.0.recipient"):
        replay_files([_write(tmp_path, data)])


@pytest.mark.parametrize(
    "text",
    [
        "{",  # truncated
        '{"format_version": 1, "reason": "sampled", "turns": ' + "7" * 5000 + "}",
        '{"kind": "selfplay_chain", "row": ' + "[" * 100000 + "]" * 100000 + "}",
        '{"kind": "selfplay_chain", "math": {"timeout_s": "soon"}}',
        "[" * 100000 + "]" * 100000,
        "\x00\xff binary",
    ],
    ids=["truncated", "digits", "deep chain", "wrong type", "deep", "binary"],
)
def test_malformed_bundle_files_are_a_one_line_error(tmp_path, text):
    """Whichever reader the file reaches (the command asks is_chain_bundle first), one line, no traceback."""
    path = tmp_path / "bad.json"
    path.write_bytes(text.encode("utf-8", errors="surrogateescape") if "\xff" not in text else b"\x00\xff binary")
    reader = read_chain_bundle if is_chain_bundle(path) else read_bundle
    with pytest.raises(BundleError) as caught:
        reader(path)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 600, str(caught.value)


def test_a_huge_bundle_file_is_refused_unread(tmp_path):
    path = tmp_path / "huge.json"
    with path.open("wb") as out:
        out.write(b'{"environment": "')
        out.truncate(
            getattr(gym.bundle, "MAX_BUNDLE_BYTES", 64 << 20) + 1024
        )  # sparse: no disk, and nothing must read it whole
    assert not is_chain_bundle(path)
    for reader in (read_bundle, read_chain_bundle):
        with pytest.raises(BundleError, match="larger than"):
            reader(path)


def test_wrong_types_name_the_field(honest, tmp_path):
    """The control for type errors (already one line): the field is named."""
    with pytest.raises(BundleError, match="sandbox.budgets.memory_mb"):
        read_bundle(_write(tmp_path, _edit(honest, "sandbox.budgets.memory_mb", "lots")))


# -- chain bundles: the same list, the same check ------------------------------------------------------


@pytest.fixture(scope="module")
def chain(chain_bundles, tmp_path_factory) -> Path:
    """One honest chain bundle of a right answer (the scripted self-play policy: tests/selfplay_support.py)."""
    return write_chain_bundle(tmp_path_factory.mktemp("chain") / "right.json", chain_bundles["right"])


def test_a_chain_bundle_asking_for_a_long_or_large_host_check_is_refused(chain, tmp_path):
    """The math check runs on the host: its bounds are never the bundle's (a 1e9 s / huge-memory check)."""
    data = json.loads(chain.read_text())
    for field, value in (("timeout_s", 1e9), ("memory_mb", 1 << 30), ("start_timeout_s", 1e9), ("concurrency", 999)):
        edited = json.loads(json.dumps(data))
        edited["math"][field] = value
        path = _write(tmp_path, edited, f"{field}.json")
        with pytest.raises(BundleError) as caught:
            replay_chain_files([path])
        assert f"math.{field}" in str(caught.value) and "\n" not in str(caught.value)


def test_an_honest_chain_bundle_still_replays_identically(chain):
    (report,) = replay_chain_files([chain])
    assert report.identical, report.differences


def test_every_refused_bundle_is_named_and_nothing_starts(honest, tmp_path, trap):
    """Several bad bundles: each gets its line (logged), the error names the first and counts the rest."""
    good = _write(tmp_path, honest, "good.json")
    bad = [_write(tmp_path, _edit(honest, "sandbox.budgets.cpus", None), f"bad{i}.json") for i in range(3)]
    with pytest.raises(BundleError, match=r"bad0.json.*3 bundles refused"):
        replay_files([good, *bad])


def test_the_bundle_model_is_unchanged_for_honest_files(honest, tmp_path):
    assert read_bundle(write_bundle(tmp_path / "x.json", Bundle.model_validate(honest))) == Bundle.model_validate(
        honest
    )
