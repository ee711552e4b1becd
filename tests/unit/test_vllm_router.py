"""Several vLLM servers behind one engine (policies/vllm_router.py, policies/vllm_engine.py, trainer/vllm_sync.py),
against tiny real HTTP servers that answer as vLLM does (tests/fake_vllm.py; a completion's first id names the
server that sampled it, its second how many reloads that server has done).

- placement: a GRPO group's first prompts land on one server, each later turn follows the prompt it extends,
  other groups go to the least busy server;
- a killed server's request is an EngineError (an episode on it is masked, never a crash), the server leaves the
  rotation and the rest serve; the last server is never taken out by a failed request;
- a push reloads every server in parallel and moves the one version once; a server whose reload fails leaves the
  rotation (its replies to requests in flight are refused) and the run goes on; a push that reaches none is a
  WeightSyncError and the version stays; a server out of the rotation comes back through a successful push;
- the config's urls and replicas name their field; launched replicas get their own ports and GPUs.
The real vLLM server: tests/integration/test_vllm_engine.py.
"""

from __future__ import annotations

import sys
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
import torch
import trio

from policies.sampling import EngineError, SamplingParams
from policies.vllm_engine import VllmEngine, WeightsGate
from policies.vllm_router import AFFINITY_PROMPTS, Router
from policies.vllm_server import VllmAdmin, replica_devices
from tests.fake_vllm import STOP, FakeVllm
from trainer.config import RolloutEngineConfig
from trainer.errors import ConfigError
from trainer.vllm_sync import VllmSync, WeightSyncError, start_vllm

VOCAB = 100
PARAMS = SamplingParams(max_tokens=4, temperature=1.0, stop_token_ids=(STOP,))
TIED = None


@pytest.fixture
def fakes():
    """Three fake servers (tags 10, 11, 12), killed at the end."""
    with ExitStack() as stack:
        servers = [FakeVllm(10 + i).start() for i in range(3)]
        for server in servers:
            stack.callback(lambda s=server: s.kill() if s._thread.is_alive() else None)
        yield servers


def engine_and_sync(fakes, tmp_path, drain=True, version=0):
    gate = WeightsGate(version)
    engine = VllmEngine([f.url for f in fakes], VOCAB, gate, timeout_s=10, connect_retries=0)
    sync = VllmSync([VllmAdmin(f.url, 10) for f in fakes], gate, tmp_path, TIED, engine.router, drain=drain)
    return engine, sync


def weights():
    return {"w": torch.zeros(2)}


def test_a_group_shares_a_server_turns_follow_their_prompt_and_groups_spread():
    router = Router(["http://a", "http://b", "http://c"])
    group = [router.place([1, 2, 3, 4]) for _ in range(4)]  # a GRPO group's first turns, all outstanding
    assert len({t.server.url for t in group}) == 1
    home = group[0].server.url
    others = [router.place([7, 8, 9, k]) for k in range(2)]  # two other groups: the idle servers, one each
    assert sorted(t.server.url for t in others) == sorted({"http://a", "http://b", "http://c"} - {home})
    turn2 = router.place([1, 2, 3, 4, 20, 21, 22])  # a member's next turn extends the group's prompt
    turn3 = router.place([1, 2, 3, 4, 20, 21, 22, 23, 24])  # and the one after extends its own
    assert turn2.server.url == turn3.server.url == home
    assert router.place([1, 2, 3]).server.url != home  # a prefix of a stored prompt extends nothing: least busy
    for t in group:
        router.done(t)
    assert router.figures()["vllm/affinity_share"] > 0.4


def test_the_longest_match_wins_and_a_server_out_of_rotation_is_skipped():
    router = Router(["http://a", "http://b"])
    a = router.place([1, 2])
    b = router.place([1, 2, 3, 4])  # no: it extends [1, 2], so it follows it
    assert b.server is a.server
    router.exclude(a.server, "test")
    c = router.place([1, 2, 3, 4, 5])  # its match is out: the least busy live server
    assert c.server.url != a.server.url and c.server.live
    d = router.place([1, 2, 3, 4, 5, 6])  # and it now holds the affinity
    assert d.server is c.server


def test_a_reply_waits_while_its_server_is_reloaded_and_is_refused_if_the_reload_failed():
    router = Router(["http://a", "http://b"])
    ticket = router.place([1, 2])
    router.set_pushing(ticket.server, True)
    assert router.settled(ticket) is None  # the push's outcome is not known yet: wait
    router.set_pushing(ticket.server, False)
    assert router.settled(ticket) is True  # a push that succeeded: accepted
    router.set_pushing(ticket.server, True)
    router.exclude(ticket.server, "weight push of version 2 failed")
    assert router.settled(ticket) is None
    router.set_pushing(ticket.server, False)
    assert router.settled(ticket) is False and router.figures()["vllm/refused_replies"] == 1
    router.readmit(ticket.server)  # back through a later push: a request of before is still refused
    assert router.settled(ticket) is False and router.settled(router.place([5])) is True


def test_placement_cost_on_a_long_prompt_is_small():
    router = Router(["http://a", "http://b"])
    for k in range(AFFINITY_PROMPTS):
        router.place([k] * 8)
    prompt = list(range(8000))
    started = time.perf_counter()
    for _ in range(10):
        router.done(router.place(prompt))
    per = (time.perf_counter() - started) / 10
    print(f"placing an 8,000-token prompt among {AFFINITY_PROMPTS} remembered: {per * 1e3:.2f} ms")
    assert per < 0.05  # measured ~3 ms on the 2-core VM; a vLLM turn takes far longer


def test_requests_spread_over_servers_and_a_group_stays_on_one(fakes, tmp_path):
    engine, _ = engine_and_sync(fakes, tmp_path)
    trio.run(engine.check_logprobs_mode, [1, 2, 3])  # once, not by each of the 24 first calls
    groups = {g: [30 + g, 31, 32, 33] for g in range(6)}

    async def main():
        out = {}

        async def member(g, m):
            [c] = await engine.generate([groups[g]], PARAMS.model_copy(update={"seed": m}))
            out[(g, m)] = c

        async with trio.open_nursery() as nursery:
            for g in groups:
                for m in range(4):
                    nursery.start_soon(member, g, m)
        return out

    for f in fakes:
        f.hold.clear()  # all 24 requests in flight together before any answers
    threading.Timer(0.5, lambda: [f.hold.set() for f in fakes]).start()
    out = trio.run(main)
    by_group = {g: {out[(g, m)].token_ids[0] for m in range(4)} for g in groups}
    assert all(len(tags) == 1 for tags in by_group.values()), by_group  # each group on one server
    used = [tag for tags in by_group.values() for tag in tags]
    assert sorted(used.count(t) for t in (10, 11, 12)) == [2, 2, 2], used  # 6 groups over 3 servers, 2 each
    assert engine.gate.in_flight == 0 and all(s.outstanding == 0 for s in engine.router.servers)


def test_a_killed_server_is_masked_and_leaves_the_rotation_and_the_rest_serve(fakes, tmp_path):
    from gym.episode import run_episode
    from tasks.family import CodeFamily
    from tests.fakes import FakeGrader, FakePool, make_env

    engine, _ = engine_and_sync(fakes, tmp_path)
    trio.run(engine.check_logprobs_mode, [1, 2, 3])
    fakes[0].kill()  # the least recently picked: the next new prompt goes to it
    with pytest.raises(EngineError, match=f"{fakes[0].url}: ConnectError"):
        trio.run(engine.generate, [[40, 41]], PARAMS)
    figures = engine.router.figures()
    assert figures["vllm/servers_out"] == 1 and figures["vllm/left_rotation"] == 1
    tags = {trio.run(engine.generate, [[42, k]], PARAMS)[0].token_ids[0] for k in range(6)}
    assert tags == {11, 12}  # the rest serve, the dead one gets nothing

    env = make_env(tools={"enabled": ["submit"]}, episode={"max_turns": 1, "max_tokens_per_turn": 4})
    task = env.tasks[next(iter(env.tasks))]
    pool = FakePool()
    engine.vocab_size = env.tokenizer.vocab_size  # the environment's stop ids

    async def episode():
        return (await run_episode(env, engine, CodeFamily(pool, FakeGrader(env, pool)), task, seed=0)).trajectory

    assert not trio.run(episode).masked  # the live servers score episodes
    fakes[1].kill()
    fakes[2].kill()  # everything dead: masked, never a crash, and the last server stays in the rotation
    for _ in range(2):
        t = trio.run(episode)
        assert t.masked and t.reward is None and t.end_reason == "infra_error"
    assert sum(s.live for s in engine.router.servers) == 1


def test_a_push_reloads_every_server_and_moves_one_version(fakes, tmp_path):
    engine, sync = engine_and_sync(fakes, tmp_path, version=3)
    sync.push(weights(), 4)
    assert engine.gate.version == 4 and sync.last["servers_pushed"] == 3 and sync.last["servers_failed"] == 0
    for f in fakes:
        assert f.calls == ["/pause", "/collective_rpc", "/reset_prefix_cache", "/resume"] and f.reloads == 1
    cs = [trio.run(engine.generate, [[60, k]], PARAMS)[0] for k in range(3)]
    assert {c.token_ids[0] for c in cs} == {10, 11, 12} and {c.token_ids[1] for c in cs} == {51}
    assert {c.weights_version for c in cs} == {4}
    assert (tmp_path / "push" / "model.safetensors").is_file()


def test_a_push_that_fails_on_one_server_takes_it_out_and_the_run_goes_on(fakes, tmp_path):
    engine, sync = engine_and_sync(fakes, tmp_path)
    fakes[1].fail_reload = True
    sync.push(weights(), 1)  # no error: two of three servers hold version 1
    assert engine.gate.version == 1 and sync.last["servers_pushed"] == 2 and sync.last["servers_failed"] == 1
    assert fakes[1].calls[-1] == "/resume"  # resumed even though its reload failed
    assert [s.live for s in engine.router.servers] == [True, False, True]
    assert "version 1 failed" in engine.router.servers[1].reason
    tags = {trio.run(engine.generate, [[61, k]], PARAMS)[0].token_ids[0] for k in range(6)}
    assert tags == {10, 12}  # nothing goes to the server with weights nobody knows
    fakes[1].fail_reload = False
    sync.push(weights(), 2)  # tried again, reloaded: back in the rotation with the current weights
    assert [s.live for s in engine.router.servers] == [True, True, True] and sync.last["servers_pushed"] == 3
    assert engine.router.figures()["vllm/readmitted"] == 1
    for f in fakes:
        f.fail_reload = True
    with pytest.raises(WeightSyncError, match=r"version 3 failed on every server: .*reload failed"):
        sync.push(weights(), 3)
    assert engine.gate.version == 2 and engine.gate.in_flight == 0  # the version stays
    with pytest.raises(EngineError, match="no vLLM server is left in the rotation"):
        trio.run(engine.generate, [[62]], PARAMS)


def test_a_reply_from_a_server_whose_push_failed_is_refused(fakes, tmp_path):
    """Partial rollouts (no drain): requests in flight on a server whose reload fails are refused when they come
    back (what it sampled may be on weights nobody knows); those on a server whose reload succeeded are accepted,
    tagged with the version they started under."""
    engine, sync = engine_and_sync(fakes[:2], tmp_path, drain=False, version=5)
    trio.run(engine.check_logprobs_mode, [1, 2, 3])
    fakes[0].fail_reload = True
    results = {}

    async def main():
        async def request(name, prompt):
            try:
                results[name] = (await engine.generate([prompt], PARAMS))[0]
            except EngineError as exc:
                results[name] = exc

        for f in fakes[:2]:
            f.hold.clear()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(request, "first", [70, 1])
            await trio.sleep(0.05)
            nursery.start_soon(request, "second", [71, 1])
            while engine.gate.in_flight < 2:
                await trio.sleep(0.005)
            await trio.to_thread.run_sync(sync.push, weights(), 6)  # keep: does not wait for them
            for f in fakes[:2]:
                f.hold.set()

    trio.run(main)
    failed_first = fakes[0].prompts[-1][0]  # which request went to the server whose reload failed
    refused = "first" if failed_first == 70 else "second"
    accepted = "second" if refused == "first" else "first"
    assert isinstance(results[refused], EngineError) and "left the rotation while the request" in str(results[refused])
    assert results[accepted].weights_version == 5 and results[accepted].token_ids[0] == 11
    assert engine.gate.version == 6 and engine.router.figures()["vllm/refused_replies"] == 1


def test_the_engine_config_takes_several_urls_and_names_the_field(tmp_path):
    from sandbox.config_file import validate_config

    python = tmp_path / "python"
    python.write_text("")
    config = RolloutEngineConfig(type="vllm", urls=["http://a:8000", "http://b:8000/"])
    assert config.urls == ("http://a:8000", "http://b:8000/")
    launch = RolloutEngineConfig(type="vllm", vllm={"python": str(python), "replicas": 2, "gpus_per_replica": 1})
    assert launch.vllm.replicas == 2
    bad = [
        ({"type": "vllm", "url": "http://a:1", "urls": ["http://b:1"]}, "exactly one .given: url, urls"),
        ({"type": "vllm", "urls": []}, "urls: give at least one"),
        ({"type": "vllm", "urls": ["http://a:1", "http://a:1/"]}, "urls: http://a:1 is given twice"),
        ({"type": "vllm", "urls": ["http://a:1", "nohost"]}, r"urls\[1\]: 'nohost' names no host"),
        ({"type": "http", "url": "http://a:1", "urls": ["http://b:1"]}, "urls: only with type: vllm"),
        ({"type": "vllm", "vllm": {"python": str(python), "replicas": 0}}, "replicas"),
        ({"type": "vllm", "vllm": {"python": str(python), "replicas": 3, "port": 65534}}, "port: 3 replicas"),
        ({"type": "vllm", "vllm": {"python": str(python), "devices": ["0"]}}, "devices: only with gpus_per_replica"),
        (
            {"type": "vllm", "vllm": {"python": str(python), "replicas": 2, "gpus_per_replica": 2, "devices": ["0"]}},
            "devices: 2 replicas x 2 GPU.s. need 4 devices, got 1",
        ),
    ]
    for data, says in bad:
        with pytest.raises(ConfigError, match=says) as err:
            validate_config(RolloutEngineConfig, data, "engine", ConfigError)
        assert "engine" in str(err.value)


def test_replicas_take_their_devices_in_order(monkeypatch):
    assert replica_devices(2, 1, ["3", "5"]) == ["3", "5"]
    assert replica_devices(2, 2, None) == ["0,1", "2,3"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    assert replica_devices(2, 2, None) == ["4,5", "6,7"]
    with pytest.raises(ValueError, match="3 replicas x 2 GPU.s. need 6 devices, got 4"):
        replica_devices(3, 2, None)


def test_the_vllm_policy_spec_takes_several_servers():
    from gym.policy_client import PolicySpecError, load_engine
    from tests.fakes import make_env

    env = make_env()
    engine = load_engine("vllm:http://127.0.0.1:8000,http://127.0.0.1:8001", env)
    assert isinstance(engine, VllmEngine) and engine.urls == ["http://127.0.0.1:8000", "http://127.0.0.1:8001"]
    with pytest.raises(PolicySpecError, match="names a server twice"):
        load_engine("vllm:http://h:1,http://h:1", env)
    with pytest.raises(PolicySpecError, match="names no host"):
        load_engine("vllm:http://h:1,nohost", env)


def test_a_run_launches_its_replicas_each_on_its_port_and_gpus(tmp_path):
    """start_vllm with engine.vllm.replicas 2 and gpus_per_replica 1: two servers (fake vLLM processes run by a
    stand-in interpreter), each on its own port with its own CUDA_VISIBLE_DEVICES and log; requests reach both,
    a push reloads both, and closing the rollout stops both."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    python = tmp_path / "python"
    fake = Path(__file__).resolve().parents[1] / "fake_vllm.py"
    python.write_text(f'#!/bin/sh\nshift 2\nexec {sys.executable} {fake} "$@"\n')  # drop "-m vllm.entrypoints..."
    python.chmod(0o755)
    policy_dir = tmp_path / "policy"
    policy_dir.mkdir()
    (policy_dir / "config.json").write_text("{}")
    model = Qwen2ForCausalLM(
        Qwen2Config(vocab_size=VOCAB, hidden_size=8, intermediate_size=8, num_hidden_layers=1, num_attention_heads=1)
    )
    config = RolloutEngineConfig(
        type="vllm",
        vllm={"python": str(python), "replicas": 2, "gpus_per_replica": 1, "devices": ["3", "5"]},
        weights_dir=tmp_path / "vllm",
    )
    rollout, push = start_vllm(config, tmp_path, policy_dir, model, model.state_dict(), 0, False)
    try:
        assert push is False and len(rollout.servers) == 2
        ports = {server.port for server in rollout.servers}
        assert len(ports) == 2
        for i, devices in enumerate(["3", "5"]):
            log = tmp_path / "vllm" / f"server-{i}.log"
            deadline = time.monotonic() + 10
            while "CUDA_VISIBLE_DEVICES" not in log.read_text() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert f"CUDA_VISIBLE_DEVICES={devices}" in log.read_text()
        tags = {trio.run(rollout.engine.generate, [[80, k]], PARAMS)[0].token_ids[0] for k in range(4)}
        assert tags == {13, 15}  # each replica tags with 10 + its GPU: requests reach both
        rollout.sync.push(model.state_dict(), 1)
        assert rollout.sync.last["servers_pushed"] == 2 and rollout.engine.gate.version == 1
    finally:
        rollout.close()
    for url in rollout.engine.urls:
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{url}/health", timeout=2)
