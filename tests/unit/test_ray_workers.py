"""`gym train --ray`'s trainer side without a cluster: Ray stays unimported without the flag, the flag parses,
a group whose actor died re-runs on another node, a group nobody can run comes back masked (infra_error,
reward None: never the candidate's failure), and the routes of R3 reach the producer.

The actors are fakes whose calls answer with completed futures, as ``ObjectRef.future()`` does; the real
actors, weights and engines: tests/integration/test_train_ray.py.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import pytest
import trio
from ray import exceptions

from gym.environment import Environment
from sandbox.failure import FailureKind
from tests.trainer_support import config_data
from trainer import ray_workers
from trainer.config import TrainConfig
from trainer.masking import masked_reason
from trainer.producer import ConsumedStream

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # a fresh interpreter importing torch: 5-30 s
def test_without_the_flag_ray_is_not_imported():
    """The CLI, the loop and the producer load, and `train --ray` parses, with no `ray` module imported (a fresh
    interpreter: this module imports Ray itself)."""
    code = (
        "import sys\n"
        "from gym import cli\n"
        "import trainer.loop, trainer.producer, trainer.train_cli\n"
        "parser = cli.build_parser('train', ['train'])\n"
        "plain = parser.parse_args(['train', 'c.yaml'])\n"
        "here = parser.parse_args(['train', 'c.yaml', '--ray'])\n"
        "there = parser.parse_args(['train', 'c.yaml', '--ray', '10.0.0.1:6379'])\n"
        "print(plain.ray, repr(here.ray), there.ray, 'ray' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None", "''", "10.0.0.1:6379", "False"]


class Ref:
    def __init__(self, future: Future) -> None:
        self._future = future

    def future(self) -> Future:
        return self._future


class Method:
    """``handle.method.remote(*args)``: calls ``answer`` now and hands back a ref to its outcome."""

    def __init__(self, answer) -> None:
        self.answer = answer
        self.calls = 0

    def remote(self, *args):
        self.calls += 1
        future: Future = Future()
        try:
            future.set_result(self.answer(*args))
        except BaseException as exc:  # noqa: BLE001 - what the actor raised travels in the ref
            future.set_exception(exc)
        return Ref(future)


class Handle:
    def __init__(self, run_group) -> None:
        self.run_group = Method(run_group)


@pytest.fixture
def workers(tmp_path):
    config = TrainConfig.parse(config_data(tmp_path / "run", bound=1.0), source="test")
    env = Environment(config.env)
    stream = ConsumedStream(env.stream())
    made = ray_workers.RayWorkers(config, env, stream, None, bundle_dir=None, record_routes=True, weights_bytes=0)
    made.version = 3
    return made


def graded(workers, node: str):
    """An actor that runs the group: the trainer's masked stand-ins, unmasked and placed on ``node``."""

    def run_group(task, position, group_size, seed):
        out = ray_workers.lost_group(workers.env, task, position, group_size, seed, 3, node, "")
        done = [t.model_copy(update={"masked": False, "reward": 1.0, "placement": {"node": node}}) for t in out]
        return [(t, np.full((1, len(t.ids), 2), 7, dtype=np.int16)) for t in done]

    return run_group


def died(*args):
    raise exceptions.RayActorError()


def raised(*args):
    raise exceptions.RayTaskError("run_group", "Traceback ...", ValueError("boom"))


def run_one_group(workers, group_size: int = 3) -> list:
    async def main():
        send, receive = trio.open_memory_channel(100)
        await workers.run(send, groups=1, group_size=group_size, seed=5)
        return [t async for t in receive]

    return trio.run(main)


def test_a_group_whose_actor_died_runs_on_another_node(workers):
    dead, alive = Handle(died), Handle(graded(workers, "node-b"))
    workers.nodes = [ray_workers.Node(dead, "node-a"), ray_workers.Node(alive, "node-b")]
    trajectories = run_one_group(workers)
    assert dead.run_group.calls == 1 and alive.run_group.calls == 1
    assert [t.placement["node"] for t in trajectories] == ["node-b"] * 3
    assert not any(t.masked for t in trajectories)
    assert [n.alive for n in workers.nodes] == [False, True] and workers.lost == 1
    # the routes came back with the trajectories and reach the producer as RouteRecorder.take would
    routes = [workers.routes.take(t.ids, t.sampled) for t in trajectories]
    assert all(r is not None and r.shape == (1, len(t.ids), 2) for r, t in zip(routes, trajectories))
    assert workers.routes.pending() == 0
    # the next group goes straight to the live node
    run_one_group(workers)
    assert dead.run_group.calls == 1 and alive.run_group.calls == 2


def test_a_group_no_node_can_run_comes_back_masked_never_scored(workers):
    workers.nodes = [ray_workers.Node(Handle(died), "node-a"), ray_workers.Node(Handle(died), "node-b")]
    trajectories = run_one_group(workers)
    assert len(trajectories) == 3 and not any(n.alive for n in workers.nodes)
    for member, t in enumerate(trajectories):
        assert t.masked and t.reward is None and t.end_reason == "infra_error"
        assert FailureKind.INFRA_ERROR in t.failures and t.num_sampled == 0
        assert t.policy_version == 3 and t.seeds.member == member and t.group_id == f"5-{t.seeds.position}"
        assert "none left" in t.placement["error"]
    assert len({t.group_id for t in trajectories}) == 1  # one group: the producer delivers it whole
    assert masked_reason(trajectories[0]).startswith("rollout node: lost on 2 node(s), none left")
    # with no node at all the stream still moves on: each draw is consumed as a masked group
    again = run_one_group(workers, group_size=2)
    assert len(again) == 2 and all(t.masked for t in again)
    assert again[0].seeds.position == trajectories[0].seeds.position + 1


def test_an_actor_that_raised_masks_the_group_and_stays(workers):
    failing = Handle(raised)
    workers.nodes = [ray_workers.Node(failing, "node-a")]
    trajectories = run_one_group(workers)
    assert all(t.masked and t.reward is None for t in trajectories)
    assert all("boom" in t.placement["error"] and t.placement["node"] == "node-a" for t in trajectories)
    assert workers.nodes[0].alive and workers.nodes[0].running == 0


def test_a_node_is_chosen_by_its_running_groups():
    nodes = [ray_workers.Node(None, "a", running=2), ray_workers.Node(None, "b", running=1)]
    workers = ray_workers.RayWorkers.__new__(ray_workers.RayWorkers)
    workers.nodes = nodes
    assert workers._least_loaded(set()).node_id == "b"
    assert workers._least_loaded({"b"}).node_id == "a"
    nodes[0].alive = False
    assert workers._least_loaded({"b"}) is None


def test_an_address_nobody_listens_on_is_refused_in_one_line():
    import socket

    from trainer.errors import RayRolloutError

    with socket.socket() as probe:  # a port that was free a moment ago
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(RayRolloutError, match=rf"the Ray cluster at 127.0.0.1:{port} does not answer"):
        ray_workers.answers(f"127.0.0.1:{port}", timeout_s=2)
    ray_workers.answers("auto")  # Ray's own words are left to Ray
