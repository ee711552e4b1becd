"""Pushing the trainer's weights to a vLLM server, and starting one for a run (``engine.type: vllm``).

`VllmSync.push` writes the full weights as one safetensors file into a directory the server can read
(``engine.weights_dir``; atomically, by a rename, before the server is touched), then, inside the client's
`policies.vllm_engine.WeightsGate`, makes the server reload it (`policies.vllm_server.VllmAdmin.reload`: pause,
``reload_weights``, prefix-cache reset, resume) and moves the gate to the new version. Without
``loop.partial_rollouts`` the gate drains first (no completion spans a push, each is tagged with the version that
sampled all of it); with it, completions in flight go on across the push and keep the version they started under
(`policies.vllm_engine`). A tied output head is written as ``lm_head.weight`` too: vLLM's CPU build keeps its
own copy of the head, which a checkpoint without it leaves at the old weights.

Several servers (``engine.urls``, or ``engine.vllm.replicas``): the engine spreads requests over them
(`policies.vllm_router`) and a push reloads every one in parallel, all read the one file written, and the gate's
version (one for all) moves once every reload returned. A server whose reload fails leaves the rotation (its
replies to requests in flight are refused, so nothing it sampled on weights nobody knows is accepted) and the run
goes on with a logged error and ``sync/servers_failed``; a push that reaches no server is a `WeightSyncError`. A
server out of the rotation is tried again at each push (when its ``/health`` answers), and comes back when its
reload succeeds: it then holds the current weights.

`start_vllm` builds the engine and the sync of a run: it attaches to ``engine.url`` or ``engine.urls``, or launches
``engine.vllm`` (``replicas`` servers) on the trainer's initial weights written as a Hugging Face model directory
under the weights directory.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

from policies.vllm_engine import VllmEngine, WeightsGate, wait_healthy
from policies.vllm_router import Router
from policies.vllm_server import VllmAdmin, VllmAdminError, VllmServer, free_port, replica_devices, start_all
from trainer.config import RolloutEngineConfig
from trainer.errors import TrainerError

log = logging.getLogger(__name__)

WEIGHTS_FILE = "model.safetensors"
REJOIN_HEALTH_S = 5.0
"""How long a push waits for ``/health`` of a server out of the rotation before it tries to bring it back."""
ATTACH_TIMEOUT_S = 300.0
"""How long a run waits for an attached server's ``/health`` (it may still be loading its model)."""


class WeightSyncError(TrainerError):
    """A weight push to a vLLM server failed (the message names the server, the step of the push and the cause):
    the run stops, as sampling on unknown weights would train on a policy nobody knows."""


def tied_names(model: nn.Module) -> tuple[str, str] | None:
    """(output head key, input embedding key) of ``model``'s state dict when the two share one tensor, else None."""
    head, embed = model.get_output_embeddings(), model.get_input_embeddings()
    if head is None or embed is None or head.weight is not embed.weight:
        return None
    names = {id(module): name for name, module in model.named_modules()}
    return f"{names[id(head)]}.weight", f"{names[id(embed)]}.weight"


def write_weights(tensors: Mapping[str, torch.Tensor], path: Path, tied: tuple[str, str] | None) -> int:
    """Write ``tensors`` as one safetensors file at ``path`` (a temporary name, then a rename); bytes written. A tied
    head's key is filled from the embedding when missing; tensors sharing storage are written as copies
    (safetensors refuses aliases)."""
    out: dict[str, torch.Tensor] = {}
    seen: set[tuple[int, int]] = set()
    for name, tensor in tensors.items():
        tensor = tensor.detach().to("cpu").contiguous()
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset())
        out[name] = tensor.clone() if key in seen else tensor
        seen.add(key)
    if tied is not None and tied[0] not in out and tied[1] in out:
        out[tied[0]] = out[tied[1]].clone()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    save_file(out, str(partial))
    os.replace(partial, path)
    return path.stat().st_size


class VllmSync:
    """A `trainer.policy.WeightSync` for the vLLM servers of one engine (module docstring).

    ``admins``: one per server, in the router's order; ``router``: the engine's (`VllmEngine.router`)."""

    def __init__(
        self,
        admins: list[VllmAdmin],
        gate: WeightsGate,
        weights_dir: Path,
        tied: tuple[str, str] | None,
        router: Router,
        drain: bool = True,
        drain_timeout_s: float = 600.0,
    ) -> None:
        if [a.url for a in admins] != [s.url for s in router.servers]:
            raise ValueError("one admin per server of the router, in its order")
        self.admins, self.gate, self.weights_dir, self.tied, self.router = admins, gate, weights_dir, tied, router
        self.drain, self.drain_timeout_s = drain, drain_timeout_s
        self.last: dict[str, float] = {}
        """The last push's figures: mb, write_s, wait_s (draining), pause_s, reload_s, reset_s, resume_s (each the
        slowest server's), total_s, servers_pushed, servers_failed."""

    def push(self, tensors: Mapping[str, torch.Tensor], version: int) -> None:
        started = time.monotonic()
        push_dir = self.weights_dir / "push"
        urls = ", ".join(a.url for a in self.admins)
        try:
            size = write_weights(tensors, push_dir / WEIGHTS_FILE, self.tied)
        except OSError as exc:
            raise WeightSyncError(f"weights for {urls} could not be written to {push_dir}: {exc}") from None
        written = time.monotonic()
        try:
            with self.gate.push(version, self.drain, self.drain_timeout_s):
                held = time.monotonic()
                with ThreadPoolExecutor(len(self.admins)) as pool:
                    outcomes = list(pool.map(lambda i: self._reload(i, push_dir, version), range(len(self.admins))))
                pushed = [times for times in outcomes if isinstance(times, dict)]
                if not pushed:  # the gate keeps the old version: nothing samples the new one
                    raise WeightSyncError(
                        f"weight push of version {version} failed on every server: {'; '.join(map(str, outcomes))}"
                    )
        except TimeoutError as exc:
            raise WeightSyncError(f"weight push of version {version} to {urls} failed: {exc}") from None
        self.last = {
            "mb": size / 1e6,
            "write_s": written - started,
            "wait_s": held - written,
            **{key: max(times[key] for times in pushed) for key in pushed[0]},
            "total_s": time.monotonic() - started,
            "servers_pushed": float(len(pushed)),
            "servers_failed": float(len(outcomes) - len(pushed)),
        }
        log.info(
            "pushed version %d to %d of %d vLLM server(s): %.1f MB written in %.2f s, drained in %.2f s, reloaded in "
            "%.3f s (%.2f s in all)",
            version,
            len(pushed),
            len(outcomes),
            self.last["mb"],
            self.last["write_s"],
            self.last["wait_s"],
            self.last["reload_s"],
            self.last["total_s"],
        )

    def _reload(self, index: int, push_dir: Path, version: int) -> dict[str, float] | str:
        """Reload one server; its times, or the failure (the server then leaves the rotation, a server out of it
        comes back when the reload succeeds). A server out of the rotation that does not answer ``/health`` within
        `REJOIN_HEALTH_S` is not touched (a hung one would hold every push)."""
        admin, server = self.admins[index], self.router.servers[index]
        if not server.live and not admin.healthy(REJOIN_HEALTH_S):
            return f"{admin.url}: out of the rotation and not healthy ({server.reason})"
        self.router.set_pushing(server, True)
        try:
            times = admin.reload(push_dir, self.drain)
        except VllmAdminError as exc:
            reason = f"weight push of version {version} failed: {exc}"
            self.router.exclude(server, reason)  # before its replies are settled: they are refused
            return f"{admin.url}: {exc}"
        else:
            self.router.readmit(server)
            return times
        finally:
            self.router.set_pushing(server, False)


@dataclass
class VllmRollout:
    """What `start_vllm` hands the loop: the engine, its sync, and the servers it launched (none when attached)."""

    engine: VllmEngine
    sync: VllmSync
    servers: list[VllmServer]

    @property
    def server(self) -> VllmServer | None:
        """The first launched server (None when attached)."""
        return self.servers[0] if self.servers else None

    def close(self) -> None:
        for server in self.servers:
            server.stop()


def write_model_dir(model_dir: Path, source_dir: Path, tensors: Mapping[str, torch.Tensor], tied) -> None:
    """A Hugging Face model directory vLLM can load: the policy directory's config, generation and tokenizer files
    (copied) with ``tensors`` as its weights."""
    model_dir.mkdir(parents=True, exist_ok=True)
    for path in source_dir.iterdir():
        if path.is_file() and path.suffix in (".json", ".jinja", ".model", ".txt") and "index" not in path.name:
            shutil.copy2(path, model_dir / path.name)
    write_weights(tensors, model_dir / WEIGHTS_FILE, tied)


def start_vllm(
    config: RolloutEngineConfig,
    run_dir: Path,
    policy_dir: Path,
    model: nn.Module,
    tensors: Mapping[str, torch.Tensor],
    version: int,
    partial_rollouts: bool,
) -> tuple[VllmRollout, bool]:
    """The engine and sync of ``engine.type: vllm`` at the trainer's ``version``, and whether the weights must still
    be pushed (an attached server samples whatever it loaded; a launched one loaded ``tensors`` at start).

    ``policy_dir``: the Hugging Face directory of the policy (config and tokenizer files for launched servers);
    ``model``: the trainer's model (its vocabulary and whether its head is tied)."""
    weights_dir = Path(config.weights_dir) if config.weights_dir is not None else run_dir / "vllm"
    tied = tied_names(model)
    vocab = int(model.get_output_embeddings().weight.shape[0])
    servers = launch_servers(config, weights_dir, policy_dir, tensors, tied) if config.vllm is not None else []
    if servers:
        urls = [server.url for server in servers]
    else:
        urls = list(config.urls) if config.urls is not None else [config.url]
        field = "engine.urls" if config.urls is not None else "engine.url"
        for url in urls:
            try:
                wait_healthy(url, ATTACH_TIMEOUT_S)
            except TimeoutError as exc:
                raise WeightSyncError(f"{field}: {exc}") from None
    gate = WeightsGate(version)
    engine = VllmEngine(urls, vocab, gate, timeout_s=config.request_timeout_s)
    admins = [VllmAdmin(url) for url in engine.urls]
    sync = VllmSync(
        admins,
        gate,
        weights_dir,
        tied,
        engine.router,
        drain=not partial_rollouts,
        drain_timeout_s=config.request_timeout_s,
    )
    weights_dir.mkdir(parents=True, exist_ok=True)
    (weights_dir / "engine.json").write_text(json.dumps({"urls": engine.urls, "launched": bool(servers)}) + "\n")
    return VllmRollout(engine, sync, servers), not servers


def launch_servers(
    config: RolloutEngineConfig, weights_dir: Path, policy_dir: Path, tensors: Mapping[str, torch.Tensor], tied
) -> list[VllmServer]:
    """Start ``engine.vllm.replicas`` servers together on ``tensors`` written as a model directory (one for all):
    each on its own port, logging to ``server.log`` (one replica) or ``server-I.log``, pinned to its GPUs when
    ``gpus_per_replica`` is set. WeightSyncError naming ``engine.vllm`` when one does not come up (all stopped)."""
    launch = config.vllm
    assert launch is not None
    model_dir = weights_dir / "model"
    write_model_dir(model_dir, policy_dir, tensors, tied)
    ports: list[int] = []
    for i in range(launch.replicas):
        port = launch.port + i if launch.port is not None else free_port(launch.host)
        while launch.port is None and port in ports:  # the kernel may hand the same free port twice
            port = free_port(launch.host)
        ports.append(port)
    envs: list[dict[str, str]] = [{} for _ in ports]
    if launch.gpus_per_replica is not None:
        try:
            devices = replica_devices(launch.replicas, launch.gpus_per_replica, launch.devices)
        except ValueError as exc:
            raise WeightSyncError(f"engine.vllm.gpus_per_replica: {exc}") from None
        envs = [{"CUDA_VISIBLE_DEVICES": d} for d in devices]
    logs = [weights_dir / ("server.log" if launch.replicas == 1 else f"server-{i}.log") for i in range(launch.replicas)]
    servers = [
        VllmServer(launch.python, model_dir, launch.args, launch.host, port, log, env)
        for port, log, env in zip(ports, logs, envs)
    ]
    for server, env in zip(servers, envs):
        pinned = "".join(f" ({k}={v})" for k, v in env.items())
        log.info("starting vLLM: %s%s", " ".join(server.command), pinned)
    try:
        waited = start_all(servers, launch.startup_timeout_s)
    except VllmAdminError as exc:
        raise WeightSyncError(f"engine.vllm: {exc}") from None
    for server, seconds in zip(servers, waited):
        log.info("vLLM server %s healthy after %.1f s", server.url, seconds)
    return servers
