"""Configuration of the sandbox: image, budgets, allowlist, hardening, pool, engine.

One pydantic model per component; every field documented, unknown keys refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from images.inputs import runner_image
from sandbox.config_file import read_config, validate_config
from sandbox.engine_url import parse_engine_url
from sandbox.errors import SandboxConfigError
from sandbox.protocol import MAX_DATA


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WorkspaceBudgets(_Config):
    """Limits of one workspace container (fixed at container creation)."""

    memory_mb: int = Field(512, ge=32, description="--memory and --memory-swap (no swap); tmpfs pages count here too")
    cpus: float | None = Field(
        1.0, gt=0, le=64, description="CPU quota in cores (--cpus); None removes it (only for kill-testing)"
    )
    cpuset_cpus: str | None = Field(
        None,
        pattern=r"^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$",
        description="--cpuset-cpus: the host CPUs the workspace may run on, e.g. '1' or '0-3,6'; None: all",
    )
    pids: int | None = Field(
        128, ge=8, description="--pids-limit; None removes the limit (only for kill-testing a weakened sandbox)"
    )
    workspace_mb: int = Field(256, ge=1, description="size of the /workspace tmpfs (the disk budget)")
    workspace_inodes: int = Field(16384, ge=64, description="file-count budget of the /workspace tmpfs")
    tmp_mb: int = Field(64, ge=1, description="size of the /tmp tmpfs")
    nofile: int = Field(256, ge=16, description="RLIMIT_NOFILE of every process")
    fsize_mb: int = Field(256, ge=1, description="RLIMIT_FSIZE: largest file a process may write")

    @model_validator(mode="after")
    def _disk_fits_in_memory(self) -> WorkspaceBudgets:
        if self.workspace_mb + self.tmp_mb >= self.memory_mb:
            raise ValueError(
                f"workspace_mb + tmp_mb ({self.workspace_mb + self.tmp_mb}) must stay below memory_mb "
                f"({self.memory_mb}): tmpfs pages are charged to the container's memory, so a full disk "
                "would be reported as an OOM instead of disk_full"
            )
        return self


class CallBudgets(_Config):
    """Per tool-call defaults (a request may name its own)."""

    timeout_s: float = Field(10.0, gt=0, le=3600, description="wall-clock deadline of one call")
    output_limit_bytes: int = Field(
        1 << 20, gt=0, le=MAX_DATA, description="stdout+stderr bound; the rest is dropped and flagged"
    )
    grace_s: float = Field(
        2.0, gt=0, description="host-side slack past the deadline before the runner is presumed lost"
    )


class EpisodeBudgets(_Config):
    """Per-workspace (episode) limits enforced by the host."""

    wall_s: float = Field(
        600.0,
        gt=0,
        description=(
            "wall clock of the episode's workspace from its hand-out (an on-demand workspace's first tool call); "
            "later calls are refused"
        ),
    )
    max_calls: int = Field(64, ge=1, description="number of tool calls allowed in one episode")


class Hardening(_Config):
    """The isolation switches. The defaults are the product; weakening exists to prove kill-tests can fail."""

    network: Literal["none", "bridge"] = Field("none", description="container network mode")
    read_only_rootfs: bool = Field(True, description="mount the image's root filesystem read-only")
    seccomp: Literal["strict", "docker-default", "unconfined"] = Field(
        "strict", description="strict = our profile (no ptrace/process_vm_*/namespaces/keyrings/bpf/io_uring ...)"
    )
    drop_caps: bool = Field(True, description="cap-drop ALL (the runner alone keeps KILL/SETUID/SETGID/SETPCAP)")
    no_new_privileges: bool = Field(True, description="no_new_privs for every process in the container")


class PoolConfig(_Config):
    """The warm pool of pre-started containers."""

    size: int = Field(4, ge=0, le=64, description="containers kept started and ready; 0 disables warming")
    ttl_s: float = Field(3600.0, gt=0, description="deadline label: gc removes a container older than this")
    max_concurrent_starts: int = Field(4, ge=1, description="container starts in flight at once")
    recycle_uses: int = Field(
        0,
        ge=0,
        le=10000,
        description="tasks one warm container may serve: a released workspace whose runner resets it cleanly "
        "(sandbox/runner/reset.py checks the result) goes back to the warm pool instead of being destroyed; "
        "0 (the default) destroys every released workspace. A recycled container keeps counters a candidate can "
        "steer and the next one read (pid, inode numbers, the cgroup's CPU time): docs/sandbox.md, Recycling",
    )
    disjoint_uses: int = Field(
        16,
        ge=0,
        le=10000,
        description="tasks one container may serve when each acquire names its task's keys (the CP grader "
        "names its problem and inputs): a clean reset between them, and never two tasks that share a key, so what "
        "a candidate leaves in the counters a reset cannot put back reaches no later candidate of its own problem "
        "or inputs; "
        "acquires that name no keys (episodes, tools) always get a container that served nothing. 0: off. "
        "docs/sandbox.md, Recycling",
    )


class EngineTLS(_Config):
    """TLS of a tcp:// engine: the files `docker --tlsverify --tlscacert --tlscert --tlskey` take (PEM)."""

    ca: Path | None = Field(
        None, description="CA certificate the engine's certificate must chain to; None = the system trust store"
    )
    cert: Path | None = Field(None, description="client certificate presented to the engine (with key)")
    key: Path | None = Field(None, description="private key of the client certificate (with cert)")
    verify: bool = Field(
        True,
        description="verify the engine's certificate (against ca) and that it names the URL's host or IP; "
        "false encrypts without authenticating the engine",
    )

    @model_validator(mode="after")
    def _cert_with_key(self) -> EngineTLS:
        if (self.cert is None) != (self.key is None):
            raise ValueError(
                "tls.cert and tls.key go together: give both (a client certificate and its key) or neither"
            )
        return self


class DockerEngineConfig(_Config):
    """How the Docker engine is reached (sandbox/engine_url.py resolves it, with DOCKER_HOST and the TLS env)."""

    base_url: str | None = Field(
        None,
        description="engine URL: unix:///PATH, tcp://HOST:PORT (TLS: tls, or DOCKER_TLS_VERIFY/DOCKER_CERT_PATH) or "
        "ssh://[USER@]HOST[:PORT] (SDK calls only: no runner stream); None = DOCKER_HOST or the default unix socket",
    )
    tls: EngineTLS | None = Field(
        None,
        description="TLS of a tcp:// engine; None = DOCKER_TLS_VERIFY, DOCKER_TLS and DOCKER_CERT_PATH as the docker "
        "CLI reads them (plaintext when none is set)",
    )
    allow_insecure_tcp: bool = Field(
        False,
        description="allow plaintext tcp:// (no TLS) to a non-loopback address, refused otherwise: whoever is on "
        "the path can run root containers on that engine; plaintext to loopback is always allowed",
    )
    timeout_s: float = Field(30.0, gt=0, description="deadline of every engine API call")
    api_version: str = Field(
        "1.41", pattern=r"^1\.\d+$", description="engine API version spoken (1.41 = Docker 20.10+)"
    )
    ready_timeout_s: float = Field(30.0, gt=0, description="deadline for a new container's runner to say hello")
    outage_wait_s: float = Field(
        30.0,
        ge=0,
        description="how long workspace starts wait for an engine that stopped answering (a daemon "
        "restarting) before they fail as infra_error; counted once per outage, so a dead engine stalls a run this "
        "long, not this long per episode; 0 = fail at once",
    )

    health_interval_s: float = Field(
        5.0,
        gt=0,
        description="how often a pool over several engines (sandbox.engines) pings each one: one that does not "
        "answer is drained (its live workspaces end as infra_error), one that answers again takes work again",
    )

    @model_validator(mode="after")
    def _usable_url(self) -> DockerEngineConfig:
        # The rest (TLS from the environment, plaintext to a remote host) needs the environment: checked when
        # an Engine is made (sandbox.engine_url.resolve_engine), before any I/O.
        if self.base_url is not None:
            if parse_engine_url(self.base_url, "base_url").scheme != "tcp" and self.tls is not None:
                raise ValueError(f"tls is set but base_url = {self.base_url!r} is not tcp://: remove one")
        return self


class EngineEntry(_Config):
    """One engine of a pool spread over several (``sandbox.engines``); the rest of ``sandbox.engine`` applies to all."""

    url: str = Field(description="engine URL, as sandbox.engine.base_url takes it (unix://, tcp:// with TLS, ssh://)")
    capacity: int = Field(ge=1, le=4096, description="most workspaces live on this engine at once")
    labels: list[str] = Field(
        default_factory=list,
        description="what the host offers (e.g. which instance images it holds); sandbox.require_labels picks by them",
    )
    tls: EngineTLS | None = Field(None, description="TLS of a tcp:// engine (as sandbox.engine.tls)")
    allow_insecure_tcp: bool = Field(False, description="as sandbox.engine.allow_insecure_tcp, for this engine")

    @model_validator(mode="after")
    def _usable(self) -> EngineEntry:
        if parse_engine_url(self.url, "url").scheme != "tcp" and self.tls is not None:
            raise ValueError(f"tls is set but url = {self.url!r} is not tcp://: remove one")
        return self


class SandboxConfig(_Config):
    """Everything a workspace pool needs."""

    image: str = Field(
        default_factory=runner_image,
        description="image of workspace containers; default: this checkout's runner image, gym-runner:<hash of "
        "its inputs> (built by `python -m gym images build`)",
    )
    workdir: str = Field("/workspace", description="workspace root inside the container (a tmpfs)")
    allowlist: list[str] = Field(
        default_factory=lambda: ["/workspace"],
        description="absolute directories a call's cwd and the file tools may resolve into",
    )
    budgets: WorkspaceBudgets = Field(default_factory=WorkspaceBudgets)
    calls: CallBudgets = Field(default_factory=CallBudgets)
    episode: EpisodeBudgets = Field(default_factory=EpisodeBudgets)
    hardening: Hardening = Field(default_factory=Hardening)
    pool: PoolConfig = Field(default_factory=PoolConfig)
    engine: DockerEngineConfig = Field(default_factory=DockerEngineConfig)
    engines: list[EngineEntry] = Field(
        default_factory=list,
        description="spread workspaces over these engines (sandbox/fleet.py: placement by free capacity, an engine "
        "that stops answering is drained); empty = the one engine of sandbox.engine",
    )
    require_labels: list[str] = Field(
        default_factory=list, description="place workspaces only on engines carrying every one of these labels"
    )

    @model_validator(mode="after")
    def _distinct_engines(self) -> SandboxConfig:
        urls = [entry.url for entry in self.engines]
        if len(set(urls)) != len(urls):
            raise ValueError(f"engines: each engine once (repeated url in {urls})")
        if self.engines and self.engine.base_url is not None:
            raise ValueError("engine.base_url and engines both name engines: keep one (engines for several)")
        if self.engines and self.engine.tls is not None:
            raise ValueError("engine.tls applies to one engine: give each entry of engines its own tls")
        if self.require_labels and not any(set(self.require_labels) <= set(e.labels) for e in self.engines):
            raise ValueError(f"require_labels {self.require_labels}: no engine of engines carries all of them")
        return self

    def engine_configs(self) -> list[tuple[EngineEntry, SandboxConfig]]:
        """Each engine of ``engines`` with the single-engine config that reaches it (``engines`` emptied)."""
        return [
            (
                entry,
                self.model_copy(
                    update={
                        "engine": self.engine.model_copy(
                            update={
                                "base_url": entry.url,
                                "tls": entry.tls,
                                "allow_insecure_tcp": entry.allow_insecure_tcp,
                            }
                        ),
                        "engines": [],
                        "require_labels": [],
                    }
                ),
            )
            for entry in self.engines
        ]

    @model_validator(mode="after")
    def _absolute_allowlist(self) -> SandboxConfig:
        for entry in self.allowlist:
            if not entry.startswith("/") or "/.." in entry or "\x00" in entry:
                raise ValueError(f"allowlist entry {entry!r} must be an absolute path without '..'")
        return self

    @classmethod
    def from_yaml(cls, path: Path) -> SandboxConfig:
        """Read a YAML (or ``*.toml``) file, its ``sandbox:`` section or the whole file (sandbox.config_file);
        SandboxConfigError names the file and every invalid field."""
        data = read_config(path, SandboxConfigError)
        if not isinstance(data, dict):
            raise SandboxConfigError(f"{path}: a sandbox config is a mapping, not a {type(data).__name__}")
        return validate_config(cls, data.get("sandbox", data), str(path), SandboxConfigError)
