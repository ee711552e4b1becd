"""Which of several vLLM servers (one per GPU or replica) a completion request goes to, and which servers are in
the rotation (torch-free; `policies.vllm_engine.VllmEngine` routes every request through it).

Routing: a request whose prompt extends the whole prompt of an earlier request goes where that one went, so vLLM's
prefix cache holds it: a GRPO group's episodes share their first prompt (its first member's request places the
group), and each later turn of an episode extends its previous prompt. A prompt that extends none goes to the
live server with the fewest requests outstanding (ties: the one least recently picked). The longest match wins;
matches are found by a rolling hash of the prompt's prefixes against the last `AFFINITY_PROMPTS` prompts placed
(a collision only misplaces a request, it never changes what it samples).

Rotation: a server leaves it when a request to it fails in transport (refused, reset, timed out: the server died
or hangs; `exclude`) while another server is live, the last one stays: its requests fail either way, and it
serves again if it comes back. A weight push that fails on a server takes it out too, even the last (the push
then fails: `trainer.vllm_sync`). Leaving bumps the server's epoch: a reply to a request that entered before
(`Ticket`) is refused, so nothing sampled on weights nobody knows is ever accepted; while a push is reloading a
server, replies from it wait for the push's outcome (`settled`). A server comes back only through a successful
push (`readmit`), which gives it the trainer's current weights.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from policies.sampling import EngineError

log = logging.getLogger(__name__)

AFFINITY_PROMPTS = 4096
"""Prompts remembered for routing (the oldest forgotten first): a few steps of groups x members x turns."""


@dataclass
class Server:
    """One vLLM server's routing state (under the router's lock)."""

    url: str
    live: bool = True
    epoch: int = 0
    """Bumped each time the server leaves the rotation: replies to requests of an earlier epoch are refused."""
    outstanding: int = 0
    pushing: bool = False
    """A weight push is reloading it: replies from it wait for the outcome."""
    reason: str = ""
    """Why it is out of the rotation (the last failure)."""
    picked_at: int = 0
    requests: int = 0
    failed: int = 0


@dataclass(frozen=True)
class Ticket:
    """A request placed on ``server`` at its ``epoch``."""

    server: Server
    epoch: int


@dataclass
class RouterFigures:
    """Counts over the run (`Router.figures` reports them as metrics)."""

    left_rotation: int = 0
    readmitted: int = 0
    refused_replies: int = 0
    affinity_hits: int = 0
    placed: int = 0
    per_server: dict[str, int] = field(default_factory=dict)


class Router:
    """The servers of one engine and the placement of its requests (module docstring). Thread-safe: requests are
    placed from trio, pushes change the rotation from a worker thread."""

    def __init__(self, urls: list[str]) -> None:
        if not urls:
            raise ValueError("a router needs at least one server URL")
        if len(set(urls)) != len(urls):
            raise ValueError(f"server URLs must be distinct, got {urls}")
        self.servers = [Server(url) for url in urls]
        self._lock = threading.Lock()
        self._prompts: OrderedDict[int, Server] = OrderedDict()  # rolling hash of a whole prompt -> where it went
        self._picks = 0
        self.counts = RouterFigures(per_server={url: 0 for url in urls})

    @property
    def live(self) -> list[Server]:
        with self._lock:
            return [s for s in self.servers if s.live]

    def place(self, prompt: list[int]) -> Ticket:
        """The server for ``prompt`` (module docstring), counted outstanding until `done`; EngineError when no server
        is in the rotation."""
        hashes = prefix_hashes(prompt) if len(self.servers) > 1 else []
        with self._lock:
            live = [s for s in self.servers if s.live]
            if not live:
                reasons = "; ".join(f"{s.url}: {s.reason}" for s in self.servers)
                raise EngineError(f"no vLLM server is left in the rotation ({reasons})")
            server = None
            for h in reversed(hashes):  # the longest earlier prompt this one extends
                match = self._prompts.get(h)
                if match is not None and match.live:
                    server = match
                    self.counts.affinity_hits += 1
                    break
            if server is None:
                server = min(live, key=lambda s: (s.outstanding, s.picked_at))
            if hashes:
                self._prompts[hashes[-1]] = server
                self._prompts.move_to_end(hashes[-1])
                while len(self._prompts) > AFFINITY_PROMPTS:
                    self._prompts.popitem(last=False)
            self._picks += 1
            server.picked_at = self._picks
            server.outstanding += 1
            server.requests += 1
            self.counts.placed += 1
            self.counts.per_server[server.url] += 1
            return Ticket(server, server.epoch)

    def done(self, ticket: Ticket) -> None:
        with self._lock:
            ticket.server.outstanding -= 1

    def settled(self, ticket: Ticket) -> bool | None:
        """Whether a reply to ``ticket`` may be accepted: None while a push is reloading its server (ask again),
        False once the server left the rotation after the request entered."""
        with self._lock:
            server = ticket.server
            if server.pushing:
                return None
            if server.live and server.epoch == ticket.epoch:
                return True
            self.counts.refused_replies += 1
            return False

    def failed(self, ticket: Ticket, reason: str) -> None:
        """A request to the ticket's server failed in transport: the server leaves the rotation unless it is the
        last live one."""
        with self._lock:
            ticket.server.failed += 1
            others = [s for s in self.servers if s.live and s is not ticket.server]
            if not others or not ticket.server.live:
                return
        self.exclude(ticket.server, reason)

    def exclude(self, server: Server, reason: str) -> None:
        """Take ``server`` out of the rotation (a no-op when it is out); replies to its requests in flight are
        refused from now on."""
        with self._lock:
            if not server.live:
                server.reason = reason
                return
            server.live = False
            server.epoch += 1
            server.reason = reason
            self.counts.left_rotation += 1
            live = sum(s.live for s in self.servers)
        log.error("vLLM server %s left the rotation (%d of %d live): %s", server.url, live, len(self.servers), reason)

    def readmit(self, server: Server) -> None:
        """``server`` holds the trainer's current weights again (a push succeeded): back in the rotation."""
        with self._lock:
            if server.live:
                return
            server.live, server.reason = True, ""
            self.counts.readmitted += 1
        log.warning("vLLM server %s is back in the rotation", server.url)

    def set_pushing(self, server: Server, pushing: bool) -> None:
        with self._lock:
            server.pushing = pushing

    def figures(self) -> dict[str, float]:
        """The rotation's state and counts, as a step's metrics."""
        with self._lock:
            live = sum(s.live for s in self.servers)
            return {
                "vllm/servers_live": float(live),
                "vllm/servers_out": float(len(self.servers) - live),
                "vllm/servers_used": float(sum(n > 0 for n in self.counts.per_server.values())),
                "vllm/left_rotation": float(self.counts.left_rotation),
                "vllm/readmitted": float(self.counts.readmitted),
                "vllm/refused_replies": float(self.counts.refused_replies),
                "vllm/affinity_share": self.counts.affinity_hits / max(self.counts.placed, 1),
            }


def prefix_hashes(prompt: list[int]) -> list[int]:
    """A rolling hash of each prefix of ``prompt``: entry i stands for ``prompt[: i + 1]`` (O(len) in all, where
    hashing each prefix afresh would be O(len^2))."""
    out = []
    h = 0
    for token in prompt:
        h = hash((h, token))
        out.append(h)
    return out
