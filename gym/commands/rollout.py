"""`python -m gym rollout CONFIG`: run episodes of an environment and write trajectories and bundles.

    python -m gym rollout configs/cp_smoke.yaml --episodes 16 --policy scripted:reference --out runs/smoke

Writes under ``--out``: ``environment.json`` (the resolved configuration),
``trajectories.jsonl`` (one token-exact trajectory per line, in finishing
order), ``bundles/*.json`` (replay bundles: failures always, a sampled share
of the rest, per the environment's ``replay`` section) and ``summary.json``
(the figures printed on stdout). Policy specs: ``scripted:reference``,
``http://HOST:PORT``, ``checkpoint:DIR`` (see gym/policy_client.py). ``--set KEY=VALUE``
(repeatable) overrides a field of the file before validation (gym/overrides.py),
e.g. ``--set episode.max_turns=4``; ``environment.json`` shows the result.

A run never mixes with an earlier one: a non-empty ``--out`` is first moved
aside to ``OUT.<timestamp>`` (as `train` does). Each trajectory is appended to
``trajectories.jsonl`` (flushed and fsynced) as its episode finishes; on
SIGINT (Ctrl-C) or SIGTERM the episodes in flight are cancelled and
``summary.json`` is written with ``"interrupted": true`` and the counts so far.

Exit codes: 0 when the run finished and at least one episode was not masked
(masked episodes are then counted on stderr); 2 for a bad argument, config or
policy spec, 5 for an unreadable task file, 6 for an ``--out`` that cannot be
written, each one line ``gym: error: ...`` from gym/fault.py before ``--out`` is
touched (a non-empty ``--out`` that is, or holds, the working directory is refused
with 2 rather than moved aside); 3 (`ALL_MASKED`, the infrastructure class of
gym/fault.py) when every episode was masked (an unreachable policy URL, Docker
gone), with the first episode's cause on stderr; 130 / 143 when SIGINT / SIGTERM
interrupted it (128 + the signal number). A run that fails after ``--out`` was
made (Docker down, the image missing) still writes ``summary.json``, with
``"error"`` naming the cause, and exits with that fault's code.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from pathlib import Path

log = logging.getLogger(__name__)

ALL_MASKED = 3
"""Exit code when every episode was masked: masked means infra_error (gym/fault.py's infrastructure class)."""


def configure(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    from gym.overrides import add_argument

    del argv
    parser.add_argument(
        "config",
        type=Path,
        help="environment YAML or TOML, or a registered name (e.g. configs/cp_smoke.yaml, cp_smoke)",
    )
    parser.add_argument("--episodes", type=int, required=True, help="episodes to run (a multiple of --group-size)")
    parser.add_argument("--group-size", type=int, default=1, help="episodes per task draw (a GRPO group; default 1)")
    parser.add_argument(
        "--policy",
        default="scripted:reference",
        help="scripted:reference (default), scripted:empty, scripted:wrong, http://HOST:PORT or checkpoint:DIR",
    )
    parser.add_argument("--out", type=Path, required=True, help="run directory to write")
    parser.add_argument("--seed", type=int, default=0, help="rollout seed (sampling seeds derive from it)")
    parser.add_argument("--concurrency", type=int, default=None, help="episodes at once (default: the config's)")
    parser.add_argument(
        "--replay-rate", type=float, default=None, help="share of successful episodes bundled (default: the config's)"
    )
    add_argument(
        parser, "episode.max_turns=4 --set task_pool.sources.0.pool.limit=2 (or task_pool.path=... for a jsonl pool)"
    )


def run(args: argparse.Namespace) -> int:
    from gym.environment import Environment
    from gym.fault import CommandError, ExitCode
    from gym.overrides import OverrideError, exit_usage
    from gym.policy_client import load_engine
    from gym.registry import environment_config
    from gym.run_dir import set_aside, writable

    if args.episodes < 1 or args.group_size < 1 or args.episodes % args.group_size:
        raise CommandError(
            f"--episodes ({args.episodes}) must be a positive multiple of --group-size ({args.group_size})",
            "pass --episodes N --group-size G with N a multiple of G (both at least 1)",
            ExitCode.USAGE,
        )
    overrides = list(args.set)  # --replay-rate is an override too, applied after --set
    if args.replay_rate is not None:
        overrides.append((("replay", "rate"), args.replay_rate))
    # A bad config, task file or policy spec raises its own error class: gym.fault prints it as one line
    # with the exit code of its class (2 for the config or the spec, 5 for a data file), before --out is touched.
    try:
        config = environment_config(args.config, overrides=overrides)  # a file or a registered name
    except OverrideError as exc:
        exit_usage("rollout", exc)
    env = Environment(config)
    engine = load_engine(args.policy, env)
    out: Path = args.out
    set_aside(out)
    writable(out)
    (out / "environment.json").write_text(env.resolved())
    run = _Run(args, env, engine)
    return run.main()


class _Run:
    """One rollout into ``--out``: trajectories streamed to disk, the summary written however the run ends."""

    def __init__(self, args: argparse.Namespace, env, engine) -> None:
        self.args, self.env, self.engine = args, env, engine
        self.out: Path = args.out
        self.trajectories: list = []
        self.workers = None
        self.bar = None  # the progress bar (gym/progress.py), open while episodes run
        self.signal: str | None = None  # the signal that interrupted the run
        self.error: str | None = None  # what stopped the run, when an exception did
        self.started = time.monotonic()

    def main(self) -> int:
        import trio

        from gym.progress import progress
        from gym.trajectory import TrajectoryLog

        try:
            with (
                TrajectoryLog(self.out / "trajectories.jsonl") as sink,
                progress(self.args.episodes, "rollout", "episode") as self.bar,
            ):
                try:
                    trio.run(self._collect, sink)
                except* KeyboardInterrupt:  # SIGINT outside the signal window (pool start or close)
                    self.signal = self.signal or "SIGINT"
        except BaseException as exc:  # Docker down, the image missing, a bug: the summary still says what happened
            self.error = _one_line_cause(exc)
            try:
                self._write_summary()
            except OSError as unwritable:  # a full disk: the original failure is the one to report
                log.warning("%s: summary.json not written: %s", self.out, unwritable)
            raise
        summary = self._write_summary()
        print(json.dumps(summary, indent=2))
        return self._verdict(summary)

    async def _collect(self, sink) -> None:
        import trio

        from gym.rollout import RolloutWorkers, collect_into
        from sandbox.fleet import open_pool

        async def keep(trajectory) -> None:
            await trio.to_thread.run_sync(sink.append, trajectory)  # fsync off the event loop
            self.trajectories.append(trajectory)
            self._advance()

        args = self.args
        async with open_pool(self.env.config.sandbox) as pool:
            self.workers = RolloutWorkers(
                self.env, self.engine, pool, concurrency=args.concurrency, bundle_dir=self.out / "bundles"
            )
            # Inside the pool: these handlers replace its SIGTERM backstop while episodes run, so the
            # episodes are cancelled and their workspaces released the ordinary way.
            with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._stop_on_signal, signals, nursery.cancel_scope)
                    await collect_into(self.workers, args.episodes // args.group_size, args.group_size, args.seed, keep)
                    nursery.cancel_scope.cancel()
            self._write_summary()  # before the pool closes: a signal during its shutdown finds it written

    def _advance(self) -> None:
        rewards = [t.reward for t in self.trajectories if t.reward is not None]
        self.bar.set_postfix(
            {
                "reward": f"{sum(rewards) / len(rewards):.3f}" if rewards else "-",
                "masked": sum(t.masked for t in self.trajectories),
            },
            refresh=False,
        )
        self.bar.update(1)

    async def _stop_on_signal(self, signals, scope) -> None:
        async for signum in signals:
            self.signal = signal.Signals(signum).name
            log.warning("%s: stopping; finished trajectories are kept in %s", self.signal, self.out)
            scope.cancel()
            return

    def _write_summary(self) -> dict:
        from gym.rollout import summarize
        from gym.run_dir import write_atomic

        workers = self.workers
        summary = {
            **summarize(self.trajectories, time.monotonic() - self.started),
            "policy": self.args.policy,
            "episodes_requested": self.args.episodes,
            "interrupted": self.signal is not None,
            **({"error": self.error} if self.error else {}),
            "bundles": len(workers.bundles) if workers else 0,
            "bundle_disk": workers.bundle_budget.figures() if workers else None,
            "stream_position": workers.stream.position if workers else 0,
        }
        write_atomic(self.out / "summary.json", json.dumps(summary, indent=2) + "\n")
        disk = summary["bundle_disk"]
        if disk and (disk["skipped"] or disk["truncated"]):
            log.warning(
                "bundles: %d written, %d truncated (%d bytes cut), %d skipped (%d bytes) past replay.run_bytes %d",
                *(disk[k] for k in ("written", "truncated", "cut_bytes", "skipped", "skipped_bytes", "run_bytes")),
            )
        return summary

    def _verdict(self, summary: dict) -> int:
        """The exit code (module docstring), with a one-line reason on stderr when it is not a clean 0."""
        done, masked = summary["episodes"], summary["masked"]
        if self.signal is not None:
            print(
                f"rollout: interrupted by {self.signal} after {done}/{self.args.episodes} episodes; kept in {self.out}",
                file=sys.stderr,
            )
            return 128 + signal.Signals[self.signal].value
        if not masked:
            return 0
        reasons = [r.infra for r in self.workers.results if r.trajectory.masked and r.infra] if self.workers else []
        why = f": {reasons[0][:300]}" if reasons else ""
        if masked == done:
            print(f"rollout: every episode was masked ({masked}/{done}){why}", file=sys.stderr)
            return ALL_MASKED
        print(
            f"rollout: {masked} of {done} episodes masked (infra_error, excluded from training){why}", file=sys.stderr
        )
        return 0


def _one_line_cause(exc: BaseException) -> str:
    """``Class: message`` of the exception (a group's first leaf) for summary.json."""
    from gym.fault import leaves, one_line

    first = leaves(exc)[0]
    return f"{type(first).__name__}: {one_line(first)}"
