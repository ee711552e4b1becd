"""`gym gc` and `gym images build` across engines, without Docker: which engines ``--config``/``--engine``
choose (gym/engine_selection.py), ``collect_engines`` on fake engines (one that does not answer is reported,
the others collected), and the commands' lines and exit codes with the engine replaced by a fake."""

from __future__ import annotations

import socket
import time

import pytest
import trio
import yaml

from gym import cli
from gym.engine_selection import engine_configs, sandbox_section
from images.build import BuiltImage
from sandbox.config import SandboxConfig
from sandbox.errors import EngineUnreachable, InfraError, SandboxConfigError
from sandbox.gc import collect_engines
from sandbox.labels import Labels, current_owner

A, B = "tcp://127.0.0.1:2376", "tcp://127.0.0.1:2377"


@pytest.fixture
def certs(tmp_path):
    """Empty files where TLS files must exist (resolution checks they are there, not what they hold)."""
    folder = tmp_path / "certs"
    folder.mkdir()
    for name in ("ca.pem", "cert.pem", "key.pem"):
        (folder / name).write_text("")
    return folder


def write(path, data):
    path.write_text(yaml.safe_dump(data))
    return path


def fleet(certs) -> dict:
    tls = {"ca": str(certs / "ca.pem"), "cert": str(certs / "cert.pem"), "key": str(certs / "key.pem")}
    return {
        "engine": {"timeout_s": 7},
        "engines": [
            {"url": A, "capacity": 4, "tls": tls},
            {"url": B, "capacity": 2},
            {"url": "unix:///run/other.sock", "capacity": 1},
        ],
    }


def test_without_options_the_one_default_engine(monkeypatch):
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    (config,) = engine_configs(None, [])
    assert config.engine.base_url is None and config.engines == [] and config == SandboxConfig()


@pytest.mark.parametrize("layout", ["sandbox file", "environment", "train"])
def test_config_names_every_engine_of_its_sandbox_section_with_its_own_tls(tmp_path, certs, layout):
    section = fleet(certs)
    data = {
        "sandbox file": section,
        "environment": {"name": "e", "task_pool": {"type": "jsonl", "path": "x.jsonl"}, "sandbox": section},
        "train": {"run_dir": "runs/x", "environment": {"name": "e", "sandbox": section}},
    }[layout]
    configs = engine_configs(write(tmp_path / "f.yaml", data), [])
    assert [c.engine.base_url for c in configs] == [A, B, "unix:///run/other.sock"]
    assert configs[0].engine.tls.ca == certs / "ca.pem" and configs[1].engine.tls is None
    assert all(c.engine.timeout_s == 7 and c.engines == [] for c in configs)


def test_a_config_without_engines_is_its_one_engine_and_without_a_sandbox_the_default(tmp_path):
    one = engine_configs(write(tmp_path / "s.yaml", {"engine": {"base_url": "unix:///run/x.sock"}}), [])
    assert [c.engine.base_url for c in one] == ["unix:///run/x.sock"]
    env = write(tmp_path / "e.yaml", {"name": "e", "task_pool": {"type": "jsonl", "path": "x.jsonl"}})
    assert sandbox_section(env) == SandboxConfig()


def test_engine_picks_the_config_entry_tls_else_the_environment(tmp_path, certs, monkeypatch):
    config = write(tmp_path / "f.yaml", {"sandbox": fleet(certs)})
    monkeypatch.setenv("DOCKER_TLS_VERIFY", "1")
    monkeypatch.setenv("DOCKER_CERT_PATH", str(certs))
    picked = engine_configs(config, [B, A, "tcp://127.0.0.1:9999", A])  # repeated: once, in the order given
    assert [c.engine.base_url for c in picked] == [B, A, "tcp://127.0.0.1:9999"]
    assert picked[1].engine.tls.ca == certs / "ca.pem"
    assert picked[2].engine.tls is None and picked[2].engine.timeout_s == 7  # the rest of sandbox.engine applies
    from sandbox.engine_url import resolve_engine

    assert resolve_engine(picked[2].engine).tls.source == f"DOCKER_CERT_PATH={certs}"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("tcp://10.0.0.7:2375", "--engine tcp://10.0.0.7:2375: .*plaintext tcp:// to a non-loopback address"),
        ("http://127.0.0.1:2375", "--engine http://127.0.0.1:2375: .*an engine URL is unix:///PATH"),
        ("tcp://127.0.0.1", "--engine tcp://127.0.0.1: .*needs a port"),
    ],
)
def test_an_unusable_engine_url_is_refused_naming_the_option(url, says, monkeypatch):
    for name in ("DOCKER_TLS_VERIFY", "DOCKER_TLS", "DOCKER_HOST"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SandboxConfigError, match=says):
        engine_configs(None, [url])


def test_a_config_typo_names_the_file_and_the_field(tmp_path):
    bad = write(tmp_path / "t.yaml", {"environment": {"sandbox": {"engines": [{"url": A, "capacty": 1}]}}})
    with pytest.raises(SandboxConfigError, match=r"t.yaml: environment.sandbox: engines.0.capacty: Extra inputs"):
        engine_configs(bad, [])


def test_a_remote_plaintext_entry_of_the_config_is_refused_before_any_io(tmp_path):
    bad = write(tmp_path / "f.yaml", {"engines": [{"url": "tcp://10.0.0.7:2375", "capacity": 1}]})
    with pytest.raises(SandboxConfigError, match="plaintext"):
        engine_configs(bad, [])


# ---------------------------------------------------------------- collecting on fake engines

NOW = time.time()
DEAD = Labels(owner=f"{socket.gethostname()}:999999999:1", created=NOW, deadline=NOW + 3600)
LIVE = Labels(owner=current_owner(), created=NOW, deadline=NOW + 3600)


class FakeEngine:
    """Lists ``containers``, or raises ``fails`` (from the list, or from every removal with ``on="remove"``)."""

    fleet: dict[str, FakeEngine] = {}

    def __init__(self, url: str, containers=(), fails: Exception | None = None, on: str = "list"):
        self.url, self.containers, self.fails, self.on = url, list(containers), fails, on
        self.removed: list[str] = []
        self.closed = False

    async def labelled(self):
        await trio.sleep(0.01)
        if self.fails and self.on == "list":
            raise self.fails
        return [
            {"Id": f"{cid:0<64}", "Names": [f"/{cid}"], "Labels": labels.as_dict()} for cid, labels in self.containers
        ]

    async def remove(self, container_id):
        if self.fails and self.on == "remove":
            raise self.fails
        self.removed.append(container_id[:4])

    def close(self):
        self.closed = True


def test_collect_engines_reports_an_engine_that_does_not_answer_and_collects_the_others():
    down = FakeEngine("unix:///down.sock", fails=EngineUnreachable("the Docker engine at unix:///down.sock ..."))
    up = FakeEngine(A, [("dead", DEAD), ("live", LIVE)])
    broken = FakeEngine(B, [("gone", DEAD)], fails=InfraError("Docker engine call 'remove' failed"), on="remove")
    results = trio.run(collect_engines, [down, up, broken])
    assert [r.url for r in results] == ["unix:///down.sock", A, B]
    assert isinstance(results[0].error, EngineUnreachable) and results[0].removed == []
    assert results[1].error is None and [c.name for c in results[1].removed] == ["dead"] and up.removed == ["dead"]
    assert isinstance(results[2].error, InfraError) and "remove" in str(results[2].error)  # out of collect's nursery


def test_collect_engines_dry_run_removes_nothing():
    up = FakeEngine(A, [("dead", DEAD)])
    (result,) = trio.run(lambda: collect_engines([up], dry_run=True))
    assert [c.name for c in result.removed] == ["dead"] and up.removed == []


@pytest.fixture
def fakes(monkeypatch):
    """``sandbox.docker_engine.Engine`` replaced: each engine chosen is the FakeEngine registered for its URL."""
    FakeEngine.fleet = {}
    monkeypatch.setattr("sandbox.docker_engine.Engine", lambda config: FakeEngine.fleet[config.engine.base_url])
    return FakeEngine.fleet


def test_gc_on_several_engines_names_each_and_exits_3_when_one_did_not_answer(fakes, capsys):
    fakes[A] = FakeEngine(A, [("dead", DEAD), ("live", LIVE)])
    fakes[B] = FakeEngine(B, fails=EngineUnreachable(f"the Docker engine at {B} does not answer: refused"))
    code = cli.main(["gc", "--engine", A, "--engine", B])
    out, err = capsys.readouterr()
    assert code == 3
    assert f"{A}: removed dead (dead00000000): owner {DEAD.owner} is gone\n{A}: removed 1 containers\n" in out
    assert out.splitlines()[-1] == f"removed 1 containers on 1 of 2 engines; 1 did not answer: {B}"
    assert err == f"gym: error: {B}: the Docker engine at {B} does not answer: refused\n"
    assert fakes[A].removed == ["dead"] and fakes[A].closed and fakes[B].closed


def test_gc_exits_0_when_every_engine_answered(fakes, capsys):
    fakes[A], fakes[B] = FakeEngine(A, [("dead", DEAD)]), FakeEngine(B)
    assert cli.main(["gc", "--dry-run", "--engine", A, "--engine", B]) == 0
    out = capsys.readouterr().out
    assert f"{A}: would remove 1 containers" in out and f"{B}: would remove 0 containers" in out
    assert fakes[A].removed == []


def test_gc_of_one_engine_that_does_not_answer_is_the_one_line_error(fakes, capsys, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", A)
    monkeypatch.delenv("DOCKER_TLS_VERIFY", raising=False)
    monkeypatch.delenv("DOCKER_TLS", raising=False)
    fakes[None] = FakeEngine(A, fails=EngineUnreachable(f"the Docker engine at {A} does not answer: refused"))
    assert cli.main(["gc"]) == 3
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(
        f"gym: error: the Docker engine at {A} does not answer: refused — start dockerd"
    )


def test_images_build_on_each_engine_in_turn(fakes, capsys, monkeypatch):
    fakes[A], fakes[B] = FakeEngine(A), FakeEngine(B, fails=EngineUnreachable(f"the Docker engine at {B} ..."))
    built = []

    def client_of(engine):
        if engine.fails:
            raise engine.fails
        return type("Client", (), {"close": lambda self: built.append(("closed", engine.url))})()

    def build_on(client, args):
        built.append(("built", args.swe))
        return [BuiltImage("gym-runner:abc", "abc", False, 0.0)]

    monkeypatch.setattr("gym.commands.images.build_client", client_of)
    monkeypatch.setattr("gym.commands.images.build_on", build_on)
    assert cli.main(["images", "build", "--engine", B, "--engine", A]) == 3
    out, err = capsys.readouterr()
    assert f"{A}: gym-runner:abc" in out and "inputs=abc cached" in out and B not in out.splitlines()[0]
    assert out.splitlines()[-1] == f"built on 1 of 2 engines; did not answer: {B}"
    assert err == f"gym: error: {B}: the Docker engine at {B} ...\n"
    assert built == [("built", None), ("closed", A)]
