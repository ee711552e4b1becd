"""The command registry behind `python -m gym`.

Each command lives in its own module exposing ``configure(parser, argv)`` and
``run(args) -> int``. Modules are imported only when their command runs (or
its ``--help`` is asked for), so `python -m gym --help` never imports torch.
A command owned by a higher layer lives in that layer (``train``: `trainer.train_cli`, ``serve``:
`policies.serve_cli`); the gym names it only as a dotted path, never imports it (tests/unit/test_layers.py).
A command that fails for a known reason prints one line and exits with its
class's code (`gym.fault`, docs/cli.md); ``-v`` anywhere adds the traceback.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import logging
import re
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from gym.fault import ExitCode, describe, silence_stdout

DESCRIPTION = (
    "Sandboxed agentic code-RL gym: hardened Docker workspaces, graders nobody can fool, "
    "token-exact trajectories, GRPO on an RDEP MoE policy."
)

# name -> (dotted module path, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "images": ("gym.commands.images", "build the base rootfs and the sandbox images (cached by input hash)"),
    "gc": ("gym.commands.gc", "remove gym containers whose owner is gone or whose deadline passed"),
    "demo": ("gym.commands.demo", "run a short sandbox demo: acquire workspaces, run tool calls, release"),
    "bench": ("gym.commands.bench", "run a benchmark and print side-by-side figures"),
    "grade": ("gym.commands.grade", "grade solutions against CP tasks (one fresh sandbox per task)"),
    "tasks": (
        "gym.commands.tasks",
        "generate the learnable CP task family (generate), build the shipped SWE instances (build-swe), derive their test ids",
    ),
    "killtest": (
        "gym.commands.killtest",
        "run the sandbox kill-test: attack catalog, host checks, posture; exit 0 only if all contained",
    ),
    "soak": (
        "gym.commands.soak",
        "hammer real workspaces with a seeded mix of benign calls; exit 0 only if no infra error, runner death or leak",
    ),
    "tokenizer": ("gym.commands.tokenizer", "train the default BPE tokenizer, or describe a tokenizer spec"),
    "rollout": (
        "gym.commands.rollout",
        "run episodes of an environment with a policy; write trajectories and replay bundles",
    ),
    "replay": ("gym.commands.replay", "re-execute replay bundles in fresh workspaces and report any difference"),
    "selfplay": (
        "gym.commands.selfplay",
        "generator/verifier/meta-verifier self-play on math problems: accepted chains, verifier rows, bundles",
    ),
    "envs": (
        "gym.commands.envs",
        "list the environments one can name instead of a config file (shipped and installed packages)",
    ),
    "show": ("gym.commands.show", "print a replay bundle as a readable transcript"),
    "plot": (
        "gym.commands.plot",
        "draw a training run's curves (reward, pass rate, held-out pass@k, entropy, KL, time) as a PNG",
    ),
    "serve": ("policies.serve_cli", "serve a policy: OpenAI-compatible token-in/token-out server with weight updates"),
    "sandbox-serve": (
        "gym.commands.sandbox_serve",
        "serve the sandbox over HTTP: SandboxFusion's /run_code in fresh workspaces, /v1/grade for CP and math rows",
    ),
    "train": (
        "trainer.train_cli",
        "train a policy with GRPO on an environment (async rollouts, checkpoints, --resume)",
    ),
    "plan": (
        "trainer.plan_cli",
        "print a training config's per-rank memory (parameters, gradients, optimizer, activations) and whether it fits",
    ),
    "export": (
        "trainer.export_cli",
        "write a training checkpoint (sharded or not) as a Hugging Face model directory transformers loads",
    ),
    "verifier": (
        "trainer.verifier_cli",
        "train a process (step-level) verifier; held-out accuracy and AUC vs baselines",
    ),
}


# name -> example command lines, shown under `python -m gym NAME --help`: each line is what follows
# the command's own program name (`python -m gym NAME`, or `code-rl-gym NAME` installed), see epilog()
EXAMPLES: dict[str, tuple[str, ...]] = {
    "images": (
        "build",
        "build --swe tasks/swe/instances.jsonl --repos-dir tasks/swe/repos",
        "build --config fleet.yaml",
        "tag",
    ),
    "gc": ("--dry-run", "", "--config fleet.yaml", "--engine tcp://10.0.0.7:2376 --engine unix:///var/run/docker.sock"),
    "demo": ("", "--workspaces 2 -v"),
    "bench": ("sandbox", "grader --json grader.json", "rollout --episodes 8"),
    "grade": ("--tasks tasks/samples/taco.jsonl --solutions tasks/samples/taco.solutions.jsonl",),
    "tasks": (
        "generate --out runs/tasks --seed 0",
        "build-swe",
        "derive-swe-tests --instance pytoolz__toolz-gym-1",
    ),
    "killtest": ("", "--list", "--config configs/killtest_weak_pids.yaml"),
    "soak": ("--workspaces 4 --minutes 2 --json soak.json",),
    "tokenizer": ("train", "info bpe", "info bpe:build/tokenizer/tokenizer.json --text 'print(1)'"),
    "rollout": (
        "configs/cp_smoke.yaml --episodes 16 --policy scripted:reference --out runs/smoke",
        "configs/cp_smoke.yaml --episodes 4 --out runs/s --set episode.max_turns=4",
    ),
    "replay": ("runs/smoke/bundles/*.json",),
    "selfplay": (
        "configs/selfplay_tiny.yaml --max-problems 4 --out runs/selfplay",
        "configs/selfplay_tiny.yaml --max-problems 36 --policy scripted:selfplay --out runs/sp",
    ),
    "envs": ("list", "list --json", "show cp_smoke"),
    "show": ("runs/smoke/bundles/BUNDLE.json --full",),
    "plot": ("runs/cp_grpo_tiny", "runs/cp_grpo_tiny --out curves.png"),
    "serve": ("configs/policy_tiny.yaml --port 8000",),
    "sandbox-serve": ("", "configs/sandbox_serve.yaml --port 8080", "--port 0 -v"),
    "train": (
        "configs/cp_grpo_tiny.yaml",
        "configs/cp_grpo_tiny.yaml --resume",
        "my_run.toml --steps 3 --set optimizer.lr=1e-3",
        "configs/cp_grpo_tiny.yaml --ray",
        "configs/cp_grpo_tiny.yaml --ray 10.0.0.1:6379",
    ),
    "plan": (
        "configs/qwen2_1.5b_grpo.yaml --gpus 2 --gpu-memory 80",
        "configs/qwen2_7b_grpo.yaml --gpus 8 --gpu-memory 80 --json plan.json",
    ),
    "export": ("runs/cp_grpo_tiny runs/cp_grpo_tiny-hf", "runs/grpo/checkpoints/step_000010 hf/ --max-shard-gb 5"),
    "verifier": ("configs/verifier_tiny.yaml", "configs/verifier_tiny.yaml --steps 50 --out runs/v50"),
}

HELP_FORMATTER = argparse.RawDescriptionHelpFormatter
"""Every parser with an examples epilog uses it, so the example lines keep their line breaks."""


def epilog(lines: Sequence[str]) -> str | None:
    """An ``examples:`` epilog, one line per example; each line is the arguments after the parser's own
    program name.

    argparse writes ``%(prog)s`` as that parser's prog (``python -m gym bench sandbox``, or ``code-rl-gym
    bench sandbox`` when run as the console script), so the examples name the program actually run."""
    if not lines:
        return None
    return "examples:\n" + "\n".join(f"  %(prog)s {line}".rstrip() for line in (x.replace("%", "%%") for x in lines))


def examples(name: str) -> str | None:
    """The ``--help`` epilog of command ``name``."""
    return epilog(EXAMPLES.get(name, ()))


def version() -> str:
    """The project version: the installed distribution's, else pyproject.toml's (a checkout run in place)."""
    try:
        return importlib.metadata.version("code-rl-gym")
    except importlib.metadata.PackageNotFoundError:
        text = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text(encoding="utf-8")
        found = re.search(r'^version\s*=\s*"([^"]+)"', text, re.MULTILINE)
        return found.group(1) if found else "unknown"


VERBOSE_HELP = "debug logging, and the traceback of a failure, on stderr"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
LOG_LEVEL_HELP = "log level on stderr (default INFO; per-episode and per-task lines are DEBUG; -v implies DEBUG)"


def _configure_logging(verbose: bool, level: str = "INFO") -> None:
    level_no = logging.DEBUG if verbose else getattr(logging, level)
    logging.basicConfig(
        level=level_no,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # httpx logs every request at INFO (gym/policy_client.py's policy client): a line per model call
    for chatty in ("httpx", "httpcore"):
        logging.getLogger(chatty).setLevel(max(level_no, logging.WARNING) if not verbose else logging.DEBUG)


def program() -> str:
    """The name this main runs under: ``code-rl-gym`` as the installed console script (pyproject.toml),
    else ``python -m gym``; every parser's prog, and so every example line, starts with it."""
    return "code-rl-gym" if Path(sys.argv[0]).name == "code-rl-gym" else "python -m gym"


def build_parser(command: str | None = None, argv: list[str] | None = None) -> argparse.ArgumentParser:
    """Top-level parser; only ``command``'s module is imported to add its arguments."""
    parser = argparse.ArgumentParser(prog=program(), description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    parser.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    parser.add_argument(
        "--log-level", type=str.upper, choices=LOG_LEVELS, default="INFO", metavar="LEVEL", help=LOG_LEVEL_HELP
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_path, help_text) in COMMANDS.items():
        cmd_parser = sub.add_parser(
            name,
            help=help_text,
            description=help_text,
            epilog=examples(name),
            formatter_class=HELP_FORMATTER,
        )
        if name == command:
            importlib.import_module(module_path).configure(cmd_parser, argv or [])
            _accept_verbose(cmd_parser)
    return parser


def _accept_verbose(parser: argparse.ArgumentParser) -> None:
    """``-v`` and ``--log-level`` after the command too (``demo -v``, ``tokenizer info X -v``), at every
    level of sub-commands.

    SUPPRESS keeps an absent option from resetting the one given before the command."""
    options = {option for action in parser._actions for option in action.option_strings}
    if "-v" not in options:
        parser.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP)
    if "--log-level" not in options:
        parser.add_argument(
            "--log-level",
            type=str.upper,
            choices=LOG_LEVELS,
            default=argparse.SUPPRESS,
            metavar="LEVEL",
            help=LOG_LEVEL_HELP,
        )
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _accept_verbose(child)


TAKES_VALUE = ("--log-level",)
"""Top-level options whose value is the next token (never the command's name)."""


def selected(argv: list[str], names: object) -> str | None:
    """The first positional token of ``argv`` when it names one of ``names``."""
    tokens = iter(argv)
    for token in tokens:
        if token in TAKES_VALUE:
            next(tokens, None)
        elif not token.startswith("-"):
            return token if token in names else None
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = selected(argv, COMMANDS)
    parser = build_parser(command, argv)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    _configure_logging(args.verbose, args.log_level)
    module = importlib.import_module(COMMANDS[args.command][0])
    try:
        code = int(module.run(args) or 0)
        sys.stdout.flush()  # inside the handler: a reader that went away (`| head`) is found here, not at exit
        return code
    except BaseException as exc:  # Ctrl-C and groups too; anything not a known fault is re-raised untouched
        fault = describe(exc)
        if fault is None:
            raise
        if fault.code is ExitCode.OUTPUT_CLOSED:  # nobody reads any more: nothing to say, no traceback
            silence_stdout()
            return int(fault.code)
        if args.verbose:
            traceback.print_exception(exc)
        print(fault.line(), file=sys.stderr)
        return int(fault.code)
