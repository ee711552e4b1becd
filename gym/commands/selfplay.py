"""`python -m gym selfplay CONFIG --max-problems N --out DIR`: generator, verifier and meta-verifier self-play.

    python -m gym selfplay configs/selfplay_tiny.yaml --max-problems 4 --out runs/selfplay
    python -m gym selfplay configs/selfplay_tiny.yaml --max-problems 36 --policy scripted:selfplay --out runs/sp
    python -m gym replay runs/sp/bundles

CONFIG is a self-play YAML (`gym.selfplay.run.SelfplayConfig`, configs/selfplay_tiny.yaml) naming a math
environment; the loop, the roles, the acceptance rule and the files written under ``--out``
(``config.json``, ``chains.jsonl``, ``accepted.jsonl``, ``verifier_rows.jsonl``, ``bundles/``,
``summary.json``) are in gym/selfplay/run.py and docs/selfplay.md. An existing non-empty ``--out`` is
refused (exit 2): self-play output is training data, never mixed with an earlier run's.

Exit codes: 0 when the run finished (whatever was accepted); 2 for a bad argument, config or policy
spec and 6 for an ``--out`` that cannot be written, before anything runs; 3 when the engine failed on
every problem (an unreachable policy URL); 130 / 143 when SIGINT / SIGTERM stopped it: the chains
finished so far are on disk and ``summary.json`` says ``"interrupted": true``.
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

SPECS = (
    "local:SERVE_YAML (a policy built in this process), http://HOST:PORT, checkpoint:DIR, "
    "scripted:selfplay, scripted:selfplay-gullible or scripted:selfplay-contrarian"
)


def configure(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    del argv
    parser.add_argument("config", type=Path, help="self-play YAML (e.g. configs/selfplay_tiny.yaml)")
    parser.add_argument("--max-problems", type=int, required=True, help="problems drawn from the task stream")
    parser.add_argument("--out", type=Path, required=True, help="run directory to write (must be new or empty)")
    parser.add_argument(
        "--policy",
        default=None,
        help=f"{SPECS} (default: the config's, local:configs/policy_tiny.yaml in the shipped one)",
    )
    parser.add_argument("--seed", type=int, default=None, help="sampling and bundle seed (default: the config's)")
    parser.add_argument(
        "--replay-rate", type=float, default=None, help="share of accepted chains bundled (default: the config's)"
    )


def run(args: argparse.Namespace) -> int:
    from gym.environment import Environment
    from gym.fault import CommandError, ExitCode
    from gym.policy_client import PolicySpecError
    from gym.registry import environment_config
    from gym.run_dir import writable
    from gym.selfplay.run import ChainRunner, SelfplayConfigError, load_config, load_selfplay_engine

    if args.max_problems < 1:
        raise CommandError(
            f"--max-problems is {args.max_problems}", "pass --max-problems N with N >= 1", ExitCode.USAGE
        )
    out: Path = args.out
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise CommandError(
            f"{out} exists and is not an empty directory",
            "pass a new --out directory (self-play never mixes with an earlier run)",
            ExitCode.USAGE,
        )
    try:
        options = {"policy": args.policy, "seed": args.seed, "replay_rate": args.replay_rate}
        config = load_config(args.config, options)
    except SelfplayConfigError as exc:
        problem = "; ".join(str(exc).splitlines())
        raise CommandError(
            problem, "fix the file or the option (every key: gym/selfplay/run.py)", ExitCode.USAGE
        ) from None
    env = Environment(environment_config(config.environment))
    if env.chat_format is not env.harmony:  # the roles read Harmony's channels (gym/selfplay/roles.py)
        raise CommandError(
            f"self-play speaks Harmony, and environment {env.name} has chat format {env.chat_format.name}",
            "set chat_format: harmony in the environment of the self-play config",
            ExitCode.USAGE,
        )
    try:
        engine, context_length = load_selfplay_engine(config.policy, env, config.prompts)
    except PolicySpecError as exc:  # gym.fault's fix for it lists rollout's specs, not these
        raise CommandError(str(exc), f"selfplay --policy takes {SPECS}", ExitCode.USAGE) from None
    writable(out)
    (out / "config.json").write_text(json.dumps(config.model_dump(mode="json"), indent=2) + "\n")
    return _Run(args, config, env, ChainRunner(config, env, engine, context_length)).main()


class _Run:
    """One self-play run into ``--out``: chains streamed to disk, the summary written however it ends."""

    def __init__(self, args: argparse.Namespace, config, env, runner) -> None:
        from gym.selfplay.run import SelfplayOutput

        self.args, self.config, self.runner = args, config, runner
        self.output = SelfplayOutput(args.out, config, env)
        self.signal: str | None = None
        self.error: str | None = None
        self.started = time.monotonic()

    def main(self) -> int:
        import trio

        try:
            trio.run(self._main)
        except BaseException as exc:
            self.error = f"{type(exc).__name__}: {str(exc)[:300]}"
            self._summary()
            raise
        finally:
            self.output.close()
        summary = self._summary()
        print(json.dumps(summary, indent=2))
        if self.signal is not None:
            print(f"selfplay: interrupted by {self.signal}; chains so far kept in {self.args.out}", file=sys.stderr)
            return 128 + signal.Signals[self.signal].value
        if summary["engine_errors"] and not summary["chains"]:
            print(f"selfplay: the engine failed on every problem ({summary['engine_errors']})", file=sys.stderr)
            return 3
        return 0

    async def _main(self) -> None:
        import trio

        from gym.selfplay.run import run_selfplay

        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._stop_on_signal, signals, nursery.cancel_scope)
                await run_selfplay(self.runner, self.output, self.args.max_problems, self._summary)
                nursery.cancel_scope.cancel()

    async def _stop_on_signal(self, signals, scope) -> None:
        async for signum in signals:
            self.signal = signal.Signals(signum).name
            log.warning("%s: stopping; finished chains are kept in %s", self.signal, self.args.out)
            scope.cancel()
            return

    def _summary(self) -> dict:
        from gym.selfplay.run import write_summary

        summary = {
            **self.output.tally.summary(time.monotonic() - self.started, self.runner.check_seconds),
            "policy": self.config.policy,
            "environment": self.config.environment,
            "seed": self.config.seed,
            "max_problems": self.args.max_problems,
            "interrupted": self.signal is not None,
            **({"error": self.error} if self.error else {}),
        }
        write_summary(self.args.out / "summary.json", summary)
        return summary
