"""Data-parallel replicas of the continuous engine on the CPU: one engine per core, each in its own process.

On the CPU a decode step of a small policy is hundreds of tiny ops whose dispatch, more than their arithmetic,
is the step's cost (docs/engine.md): a second torch thread hands every op to the other core and back, and a
second Python thread in one process contends for the GIL at each op. A second *process* decodes on the other
core with neither. `ReplicatedEngine` keeps one continuous engine in this process and starts ``replicas - 1``
more, each in a spawned process on its own copy of the weights, and serves the `GenerationEngine` contract
(`submit`, `generate_batch`, `load_state_dict`, ...) over all of them.

- **Routing**: a `submit` call goes whole to one replica, so the prompts of one call stay together. A call
  with a prompt some replica holds unfinished goes to that replica, so the G requests of a GRPO group sent one
  at a time still share one prefill (`policies.continuous`), while that replica has a slot for each of its rows
  (more would wait there while another replica idles: one recurring prompt must not pin the traffic to one
  replica); any other call goes to the replica with the fewest unfinished rows. A row's samples depend on its seed and the weights, not on its replica or batch mates
  (per-row generators), so the completions are those of one engine, up to the float rounding that any two
  batch compositions of one engine already differ by.
- **Weights**: `load_state_dict` checks the names and shapes here, then queues the update on every replica
  (the tensors travel as `torch.save` bytes) and returns once each has loaded them. Each replica's update waits
  for its own running rows (with ``partial_rollouts``: lands at its next step boundary), and rows submitted after
  the call start on the new weights on every replica: every token reports the version that sampled it, as with
  one engine. A version left out is the last version handed out + 1 on every replica.
- **Failures**: a replica process that dies fails the rows it held with `EngineError` (the engine's fault:
  masked, never scored) and takes no more calls; the others go on. A spawned replica that fails an update is
  retired the same way, so none serves old weights. `close` stops every replica.

The replicas run on the CPU only (each holds a full copy of the weights, and a GPU has its own engine:
`policies.cuda_graphs`).
"""

from __future__ import annotations

import asyncio
import io
import itertools
import logging
import multiprocessing
import queue
import threading
import time
from collections import Counter
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load as load_safetensors_bytes

from policies.continuous import reject, resolve
from policies.generation import GenerationEngine, checkpoint_tensors
from policies.sampling import Completion, EngineError, SamplingParams, per_prompt

log = logging.getLogger(__name__)

START_TIMEOUT_S = 300.0  # a replica imports torch and builds its model: seconds, more on a loaded machine


def _tensor_bytes(state: dict[str, torch.Tensor]) -> bytes:
    buffer = io.BytesIO()
    torch.save({k: v.detach().cpu() for k, v in state.items()}, buffer)
    return buffer.getvalue()


def _tensors(data: bytes) -> dict[str, torch.Tensor]:
    return torch.load(io.BytesIO(data), weights_only=True)


@dataclass
class _Replica:
    """One engine's book-keeping in the parent: unfinished rows, the prompts they hold, its pending calls."""

    index: int
    rows: int = 0
    prompts: Counter = field(default_factory=Counter)
    alive: bool = True
    # a child's calls and requests by token: (future, prompts) of a submit, the future of a load or stats
    pending: dict[int, tuple[Future, list[tuple[int, ...]]]] = field(default_factory=dict)
    process: multiprocessing.process.BaseProcess | None = None
    conn: object = None  # multiprocessing Connection to the child
    # messages to the child, sent in order by the sender thread: nothing blocks on the pipe while holding the lock
    outbox: queue.SimpleQueue = field(default_factory=queue.SimpleQueue)
    threads: list[threading.Thread] = field(default_factory=list)  # its sender and reader


class ReplicatedEngine:
    """``replicas`` continuous engines: ``local`` in this process, the others in spawned processes (see the
    module docstring). ``threads``: torch threads of each spawned replica."""

    def __init__(self, local: GenerationEngine, replicas: int, threads: int = 1) -> None:
        if replicas < 1:
            raise ValueError(f"replicas must be >= 1, got {replicas}")
        if not local.continuous:
            raise ValueError(f"replicas need the continuous engine, this one runs {local.mode}")
        if local.policy.device.type != "cpu":
            raise ValueError(f"replicas run on the CPU, the policy is on {local.policy.device}")
        self.local = local
        self.replicas = [_Replica(index=i) for i in range(replicas)]
        self._lock = threading.Lock()  # routing and book-keeping only: never held while waiting on a pipe or future
        self._tokens = itertools.count()
        self._closed = False
        self._version = local.weights_version  # the latest version handed out (`load_state_dict`)
        model = local.policy.model
        spec = {
            "config": model.config.to_dict(),
            "name": local.policy.name,
            "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
            "max_batch_size": local.max_batch_size,
            "pad_token_id": local.pad_token_id,
            "weights_version": local.weights_version,
            "prefill_chunk": local._batcher.prefill_chunk,
            "traced_decode": local._batcher.graphs is not None and local._batcher.graphs.trace,
            "partial_rollouts": local.partial_rollouts,
            "threads": threads,
        }
        state = _tensor_bytes(model.state_dict())
        context = multiprocessing.get_context("spawn")  # fork would copy this process's threads' locks
        try:
            for replica in self.replicas[1:]:
                parent, child = context.Pipe()
                replica.process = context.Process(
                    target=_serve, args=(child, spec), name=f"engine-replica-{replica.index}", daemon=True
                )
                replica.process.start()
                child.close()  # a child that dies makes sends fail and receives see the end of the pipe
                replica.conn = parent
                # the weights over the pipe, not with the spawn arguments: spawn writes those while holding the
                # child's end open, so a child that dies before reading them (a script that spawns again at
                # import) would block that write for ever
                replica.outbox.put(("state", state))
                self._start_thread(replica, self._send_all, "sender")
            for replica in self.replicas[1:]:
                ready = self._wait_ready(replica)
                if ready[0] != "ready":
                    raise EngineError(f"engine replica {replica.index} failed to start: {ready[1]}")
                self._start_thread(replica, self._read, "reader")
        except BaseException:
            self._closed = True
            self._stop_children()  # the local engine is the caller's
            raise
        log.info("%d engine replicas: this process and %d spawned", replicas, replicas - 1)

    @staticmethod
    def _start_thread(replica: _Replica, target, role: str) -> None:
        thread = threading.Thread(target=target, args=(replica,), name=f"engine-replica-{replica.index}-{role}")
        thread.daemon = True
        thread.start()
        replica.threads.append(thread)

    @staticmethod
    def _wait_ready(replica: _Replica) -> tuple:
        """The child's first message, or EngineError when it exits or stays silent `START_TIMEOUT_S`."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                if replica.conn.poll(0.2):
                    return replica.conn.recv()
            except (EOFError, OSError):
                break
            if not replica.process.is_alive():
                break
        else:
            raise EngineError(f"engine replica {replica.index} did not start in {START_TIMEOUT_S:.0f}s")
        replica.process.join(timeout=30)  # it closed its end of the pipe: exiting
        code = replica.process.exitcode
        raise EngineError(
            f"engine replica {replica.index} exited while starting (exit code {code}; a script that builds replicas "
            "must do so under `if __name__ == '__main__':`, as each replica imports it again)"
        )

    # -- the `GenerationEngine` contract
    @property
    def policy(self):
        return self.local.policy

    @property
    def mode(self) -> str:
        return "continuous"

    @property
    def continuous(self) -> bool:
        return True

    @property
    def max_batch_size(self) -> int:
        return self.local.max_batch_size

    @property
    def weights_version(self) -> int:
        return self.local.weights_version

    @property
    def model_name(self) -> str:
        return self.local.model_name

    @property
    def context_length(self) -> int:
        return self.local.context_length

    @property
    def vocab_size(self) -> int:
        return self.local.vocab_size

    def check_request(self, prompt: list[int], params: SamplingParams) -> None:
        self.local.check_request(prompt, params)

    async def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        return await asyncio.to_thread(self.generate_batch, prompts, per_prompt(params, len(prompts)))

    def generate_batch(self, prompts: list[list[int]], params: list[SamplingParams]) -> list[Completion]:
        return self.submit(prompts, params).result()

    def submit(self, prompts: list[list[int]], params: list[SamplingParams]) -> Future:
        """Route the call to one replica (see the module docstring); the future of its completions."""
        self.local._check(prompts, params)  # a bad request raises here, for this caller only
        keys = [tuple(p) for p in prompts]
        with self._lock:
            if self._closed:
                raise EngineError("the generation engine was closed")
            replica = self._route(keys)
            replica.rows += len(keys)
            replica.prompts.update(keys)
            if replica.index > 0:
                future = self._request(replica, "submit", prompts, params, keys=keys)
        if replica.index == 0:  # outside the lock: the local worker resolves futures holding its own lock
            try:
                future = self.local.submit(prompts, params)
            except BaseException:
                self._finished(replica, keys)
                raise
        future.add_done_callback(lambda _, r=replica, k=keys: self._finished(r, k))
        return future

    def _route(self, keys: list[tuple[int, ...]]) -> _Replica:
        live = [r for r in self.replicas if r.alive]
        if not live:
            raise EngineError("every engine replica has exited")
        for replica in live:
            if any(replica.prompts[k] for k in keys) and replica.rows + len(keys) <= self.local.max_batch_size:
                return replica  # its rows share the prefill (while it has slots for them: else they would wait)
        return min(live, key=lambda r: r.rows)

    def _finished(self, replica: _Replica, keys: list[tuple[int, ...]]) -> None:
        with self._lock:
            replica.rows -= len(keys)
            replica.prompts.subtract(keys)
            replica.prompts += Counter()  # drop the zero counts

    def load_state_dict(self, state: dict[str, torch.Tensor], version: int | None = None) -> int:
        """Load ``state`` on every replica (see the module docstring); the new version. A spawned replica that
        fails to load (or dies meanwhile) is retired, so none serves the old weights; the call fails only when
        this process's engine does."""
        self.local.policy.check_state_dict(state)
        data = _tensor_bytes(state)
        with self._lock:
            if self._closed:
                raise EngineError("the generation engine was closed")
            version = self._version + 1 if version is None else version
            self._version = version
            remote = [(r, self._request(r, "load", data, version)) for r in self.replicas[1:] if r.alive]
            local = self.local.schedule_load(state, version, checked=True)  # checked above, outside the lock
        local.result()
        for replica, future in remote:
            try:
                future.result()
            except Exception as exc:
                self._retire(replica, f"it did not load weights version {version}: {exc}")
        return version

    def load_checkpoint(self, path: Path, version: int | None = None) -> int:
        return self.load_state_dict(checkpoint_tensors(Path(path)), version)

    def load_safetensors(self, data: bytes, version: int | None = None) -> int:
        return self.load_state_dict(load_safetensors_bytes(data), version)

    def stats(self) -> dict:
        """`GenerationEngine.stats` summed over the live replicas (timings in one list), plus ``replicas``
        (live) and ``rows`` (rows each has admitted so far, this process's first)."""
        with self._lock:
            asked = [self._request(r, "stats") for r in self.replicas[1:] if r.alive]
        parts = [self.local.stats()]
        for future in asked:
            try:
                parts.append(future.result())
            except EngineError:  # it died meanwhile: its rows are no longer anyone's
                pass
        return {
            "prefills": sum(p["prefills"] for p in parts),
            "admitted": sum(p["admitted"] for p in parts),
            "cancelled": sum(p["cancelled"] for p in parts),
            "timings": [t for p in parts for t in p["timings"]],
            "replicas": len(parts),
            "rows": [p["admitted"] for p in parts],
        }

    def replica_counts(self) -> dict[str, int]:
        """``started`` and ``live`` replicas (this process's included), for /health: a spawned replica that died
        or was retired takes no more calls and is not replaced (docs/engine.md)."""
        with self._lock:
            return {"started": len(self.replicas), "live": sum(r.alive for r in self.replicas)}

    def close(self) -> None:
        """Stop every replica (their running rows finish first; a child that does not stop in 30 s is
        killed; calls still waiting fail with EngineError); idempotent."""
        with self._lock:
            self._closed = True
        self._stop_children()
        self.local.close()

    def _stop_children(self) -> None:
        for replica in self.replicas[1:]:
            replica.outbox.put(("close",))
            replica.outbox.put(None)  # the sender's last message
        for replica in self.replicas[1:]:
            if replica.process is not None and replica.process.pid is not None:
                replica.process.join(timeout=30)
                if replica.process.is_alive():
                    replica.process.kill()
                    replica.process.join(timeout=5)
            if replica.conn is not None:
                replica.conn.close()  # its reader sees the end and fails what the child never answered
            for thread in replica.threads:
                thread.join(timeout=5)

    # -- the children
    def _request(self, replica: _Replica, kind: str, *args, keys: list | None = None) -> Future:
        """Queue a message for ``replica`` (the lock held); the future of the child's answer."""
        future: Future = Future()
        token = next(self._tokens)
        replica.pending[token] = (future, keys or [])
        replica.outbox.put((kind, token, *args))
        if kind == "submit":  # a caller that cancels (a client gone) stops the rows in the child too
            future.add_done_callback(lambda f, r=replica, t=token: self._cancelled(r, t, f))
        return future

    def _cancelled(self, replica: _Replica, token: int, future: Future) -> None:
        if future.cancelled():
            with self._lock:
                replica.pending.pop(token, None)  # the child does not answer a cancelled call
            replica.outbox.put(("cancel", token))

    def _send_all(self, replica: _Replica) -> None:
        """The sender of one child's messages, in the order they were queued, until None or the pipe fails."""
        while (message := replica.outbox.get()) is not None:
            try:
                replica.conn.send(message)
            except (OSError, ValueError) as exc:  # the child is gone (its reader may not have seen it yet)
                self._lost(replica, exc)
                return

    def _read(self, replica: _Replica) -> None:
        """The reader of one child's answers: resolves its futures; fails them all when the child exits."""
        while True:
            try:
                kind, token, payload = replica.conn.recv()
                with self._lock:
                    future, _ = replica.pending.pop(token, (None, None))
                if future is None:  # a call its caller cancelled
                    continue
                if kind == "ok":  # resolve/reject: the caller may cancel meanwhile, which is no lost replica
                    resolve(future, payload)
                elif kind == "bad":  # the child's own check (the parent checks first: not expected)
                    reject(future, ValueError(payload))
                else:
                    reject(future, EngineError(f"engine replica {replica.index}: {payload}"))
            except Exception as exc:  # the end of the pipe, or an answer that cannot be read: the replica is lost
                self._lost(replica, exc)
                return

    def _retire(self, replica: _Replica, why: str) -> None:
        """Take a live replica out of service (killed; its calls fail with EngineError)."""
        log.error("retiring engine replica %d: %s", replica.index, why)
        with self._lock:
            replica.alive = False
        if replica.process is not None and replica.process.is_alive():
            replica.process.kill()  # its reader sees the end of the pipe and fails what it held

    def _lost(self, replica: _Replica, exc: BaseException) -> None:
        with self._lock:
            replica.alive = False
            pending, replica.pending = replica.pending, {}
        process = replica.process
        code = None if process is None else process.exitcode
        if pending and not self._closed:
            log.error("engine replica %d exited (exit code %s): %d calls fail", replica.index, code, len(pending))
        error = EngineError(f"engine replica {replica.index} exited (exit code {code}): {type(exc).__name__}")
        for future, _ in pending.values():
            reject(future, error)


def _serve(conn, spec: dict) -> None:
    """A spawned replica: build the engine on ``spec``'s weights, then answer the parent until it says close or
    its end of the pipe closes (the parent exited)."""
    from policies import memory_tuning
    from policies.hf_adapter import CausalLMPolicy
    from policies.modeling import RdepMoeConfig, RdepMoeForCausalLM

    try:
        kind, state = conn.recv()
        if kind != "state":
            raise EngineError(f"expected the weights first, got {kind!r}")
        torch.set_num_threads(spec["threads"])
        memory_tuning.keep_freed_memory()
        model = RdepMoeForCausalLM(RdepMoeConfig(**spec["config"])).to(getattr(torch, spec["dtype"]))
        model.requires_grad_(False)
        policy = CausalLMPolicy(model, name=spec["name"])
        policy.load_state_dict(_tensors(state))
        engine = GenerationEngine(
            policy,
            max_batch_size=spec["max_batch_size"],
            mode="continuous",
            pad_token_id=spec["pad_token_id"],
            weights_version=spec["weights_version"],
            prefill_chunk=spec["prefill_chunk"],
            traced_decode=spec["traced_decode"],
            partial_rollouts=spec["partial_rollouts"],
        )
    except Exception as exc:  # reported to the parent, which raises it
        conn.send(("failed", f"{type(exc).__name__}: {exc}"))
        return
    del spec, state
    memory_tuning.freeze_startup_objects()
    sending = threading.Lock()

    def send(message: tuple) -> None:
        with sending:
            try:
                conn.send(message)
            except (OSError, ValueError):  # the parent is gone
                pass

    running: dict[int, Future] = {}  # submitted calls not answered yet, by token (for "cancel")

    def answer(token: int, future: Future) -> None:
        running.pop(token, None)
        if future.cancelled():  # the parent cancelled it and waits for no answer
            return
        error = future.exception()
        send(("ok", token, future.result()) if error is None else ("error", token, f"{type(error).__name__}: {error}"))

    conn.send(("ready", None))
    while True:
        try:
            message = conn.recv()
        except Exception:  # the parent is gone (end of the pipe), or wrote what cannot be read
            break
        kind, rest = message[0], message[1:]
        if kind == "close":
            break
        token = rest[0]
        try:
            if kind == "submit":
                running[token] = engine.submit(rest[1], rest[2])
                running[token].add_done_callback(lambda f, t=token: answer(t, f))
            elif kind == "cancel":
                cancelled = running.pop(token, None)
                if cancelled is not None:
                    cancelled.cancel()
            elif kind == "load":
                engine.schedule_load(_tensors(rest[1]), rest[2]).add_done_callback(lambda f, t=token: answer(t, f))
            elif kind == "stats":
                send(("ok", token, engine.stats()))
        except (KeyError, ValueError) as exc:
            send(("bad", token, f"{type(exc).__name__}: {exc}"))
        except Exception as exc:
            send(("error", token, f"{type(exc).__name__}: {exc}"))
    engine.close()
