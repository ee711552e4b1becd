"""`python -m gym verifier CONFIG`: train a process (step-level) verifier and report it on held-out rows.

    python -m gym verifier configs/verifier_tiny.yaml

CONFIG is a YAML or TOML `trainer.verifier_train.VerifierConfig`: the rows (a local JSONL file of
step-labelled solutions, tasks/step_labels.py, or the seeded arithmetic generator), the held-out
rows (a file, or a share of the training problems), the policy (rdep_moe or a local hf directory),
steps, lr, batch size and the run directory ``out``. A non-empty ``out`` is first moved aside to
``OUT.<timestamp>``. The run writes ``out/config.json``, ``out/checkpoint/`` (serve it with
``verifier:`` in a serve config: ``POST /v1/score``) and ``out/metrics.json``, and prints the
held-out step-level accuracy and AUC beside the constant and step-index baselines on stdout.

Exit codes (docs/cli.md): 2 for a bad config or a label text that is not one token, 5 for a rows
file that cannot be read or holds no usable row, 6 for an ``out`` that cannot be written; each is
one line ``gym: error: ...`` before ``out`` is touched.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

log = logging.getLogger(__name__)


def configure(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    del argv
    parser.add_argument("config", type=Path, help="verifier YAML or TOML (e.g. configs/verifier_tiny.yaml)")
    parser.add_argument("--steps", type=int, default=None, help="override `steps`")
    parser.add_argument("--out", type=Path, default=None, help="override `out` (the run directory)")


def run(args: argparse.Namespace) -> int:
    from gym.run_dir import set_aside, writable
    from sandbox.config_file import read_config, validate_config
    from trainer.errors import ConfigError
    from trainer.verifier_train import VerifierConfig, train_verifier

    data = read_config(args.config, ConfigError)
    if isinstance(data, dict):  # the flags are validated like the file itself
        data.update({k: v for k, v in (("steps", args.steps), ("out", args.out)) if v is not None})
    config = validate_config(VerifierConfig, data, str(args.config), ConfigError)
    set_aside(config.out)
    writable(config.out)
    (config.out / "config.json").write_text(config.model_dump_json(indent=2) + "\n")
    metrics = train_verifier(config)
    print(table(metrics))
    return 0


def table(metrics: dict) -> str:
    """The held-out figures, the model beside its baselines, as printed on stdout."""
    held = metrics["heldout"]
    model, constant, index = held["model"], held["constant"], held["step_index"]

    def auc(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.3f}"

    lines = [
        f"held-out: {model['slots']} step slots, {model['correct_share']:.3f} correct "
        f"({metrics['data']['heldout_rows']} solutions); {metrics['steps']} steps in {metrics['wall_s']:.0f} s",
        f"{'':<28}{'accuracy':>10}{'AUC':>8}",
        f"{'verifier':<28}{model['accuracy']:>10.3f}{auc(model['auc']):>8}",
        f"{'constant (majority label)':<28}{constant['accuracy']:>10.3f}{auc(constant['auc']):>8}",
        f"{'step index prior':<28}{index['accuracy']:>10.3f}{auc(index['auc']):>8}",
        f"checkpoint: {metrics['checkpoint']}",
    ]
    return "\n".join(lines)
