"""Training a process verifier: its config, the data it reads, the loop, the held-out report, the checkpoint.

`train_verifier` is the whole run, in named steps: read and split the rows, render them
(gym/format/verifier.py), build the model (`trainer.policy.build_model`: our RDEP MoE or a local
``hf`` causal LM), take ``steps`` AdamW steps of the two-way label cross-entropy
(trainer/verifier.py) on random batches of training rows, evaluate on the held-out rows every
``eval_every`` steps and at the end, and write into ``out``:

    config.json          the resolved config
    checkpoint/          model.safetensors + config.json (a model directory `load_policy` reads)
                         + verifier.json (label ids, the slot rule, tokenizer fingerprint)
    metrics.json         held-out step-level accuracy and AUC of the model beside the baselines,
                         by step index, and the curve of loss / accuracy / AUC over training

Baselines, fitted on the training split only: ``constant`` predicts the majority training label for
every slot (its AUC is 0.5 by definition: one score for all); ``step_index`` scores a slot with the
training share of correct labels at the same step index (what position alone tells).
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field
from safetensors.torch import save_file

from gym.format.tokenizer import load_tokenizer
from gym.format.verifier import DEFAULT_CORRECT, DEFAULT_WRONG, RenderedRow, VerifierFormat
from gym.progress import progress
from policies.scorer import correct_probability, label_pair_logits
from policies.serve_config import HFPolicySource, MoEPolicySource
from sandbox.config_file import load_config
from tasks.step_labels import LabelScheme, StepRow, StepRows, load_step_rows, read_step_rows, split_by_problem
from tasks.step_samples import generate_rows
from trainer.checkpoint import model_tensors
from trainer.errors import ConfigError
from trainer.policy import build_model
from trainer.verifier import accuracy, roc_auc, verifier_loss

log = logging.getLogger(__name__)
_CONFIG = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class JsonlRows(BaseModel):
    """Step rows from a local JSONL file (tasks/step_labels.py)."""

    model_config = _CONFIG

    type: Literal["jsonl"] = "jsonl"
    path: Path
    """The file; relative to the working directory."""


class ArithmeticRows(BaseModel):
    """Rows made at run time by the seeded arithmetic generator (tasks/step_samples.py)."""

    model_config = _CONFIG

    type: Literal["arithmetic"] = "arithmetic"
    count: int = Field(3000, ge=2)
    """Solutions to generate."""
    seed: int = Field(0, ge=0)
    """Generator seed: the same seed gives the same rows."""
    error_rate: float = Field(0.5, ge=0.0, le=1.0)
    """Share of solutions with one error."""


Source = Annotated[JsonlRows | ArithmeticRows, Field(discriminator="type")]


class LabelTexts(BaseModel):
    """The two label tokens (each must be exactly one token of the tokenizer)."""

    model_config = _CONFIG

    correct: str = DEFAULT_CORRECT
    """Text of the label token for a correct step."""
    wrong: str = DEFAULT_WRONG
    """Text of the label token for a wrong step."""


class VerifierConfig(BaseModel):
    """Top level of a verifier YAML (configs/verifier_tiny.yaml)."""

    model_config = _CONFIG

    out: Path
    """Run directory: config.json, checkpoint/, metrics.json."""
    train: Source
    """Training rows."""
    heldout: Source | None = None
    """Held-out rows; leave out to hold out `heldout_fraction` of the training rows' problems instead.
    Held-out rows whose problem is also a training problem are dropped (counted in metrics.json)."""
    heldout_fraction: float = Field(0.2, gt=0.0, lt=1.0)
    """Share of distinct problems held out when `heldout` is not given."""
    split_seed: int = Field(0, ge=0)
    """Seed of that split."""
    labels: LabelScheme = LabelScheme()
    """How the files' integer labels read (binary, or PRM800K's -1/0/+1 with a neutral rule)."""
    label_texts: LabelTexts = LabelTexts()
    """The label tokens."""
    tokenizer: str = "bpe"
    """Tokenizer spec (gym/format/tokenizer.py): bpe, bpe:PATH, hf:DIR."""
    policy: Annotated[MoEPolicySource | HFPolicySource, Field(discriminator="type")]
    """The LM to train as the verifier: rdep_moe (fresh or a checkpoint) or a local hf directory."""
    max_tokens: int = Field(1024, ge=8)
    """Rows rendering to more tokens are skipped (counted) rather than cut."""
    steps: int = Field(300, ge=1)
    """Optimizer steps."""
    lr: float = Field(3e-3, gt=0)
    """AdamW learning rate (constant after `warmup_steps`)."""
    warmup_steps: int = Field(10, ge=0)
    """Linear warm-up steps."""
    weight_decay: float = Field(0.0, ge=0)
    """AdamW weight decay."""
    grad_clip: float = Field(1.0, gt=0)
    """Max gradient norm."""
    batch_size: int = Field(16, ge=1)
    """Rows per step (drawn at random from the training split)."""
    eval_every: int = Field(100, ge=1)
    """Held-out evaluation every this many steps (and after the last)."""
    eval_batch_size: int = Field(64, ge=1)
    """Rows per forward pass when evaluating."""
    seed: int = Field(0, ge=0)
    """Seed of batch order (the model's init seed is the policy's)."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Training dtype."""
    device: str = "cpu"
    """torch device."""
    threads: int | None = Field(1, ge=1)
    """torch intra-op threads (None: torch's default). 1 is the fastest for the tiny policy on a shared
    2-core machine: measured 0.13 s a step (batch 16) against 2.1 s with 2 threads, whose OpenMP
    workers spin waiting on each other under load (docs/process_verifier.md)."""
    progress: bool = True
    """A tqdm bar on stderr (drawn only when stderr is a terminal)."""

    @classmethod
    def load(cls, path: str | Path) -> VerifierConfig:
        """A YAML or TOML file; ConfigError names the file and each invalid field, one line each."""
        return load_config(path, cls, ConfigError)


def read_source(source: JsonlRows | ArithmeticRows, scheme: LabelScheme) -> StepRows:
    """The rows of one source (a generator's rows go through the same reader as a file's)."""
    if isinstance(source, JsonlRows):
        return load_step_rows(source.path, scheme)
    generated = generate_rows(source.count, source.seed, source.error_rate)
    return read_step_rows([json.dumps(row) for row in generated], scheme)


def splits(config: VerifierConfig) -> tuple[list[StepRow], list[StepRow], dict]:
    """(train, held-out, data report): the held-out side shares no problem with the training side."""
    train = read_source(config.train, config.labels)
    report: dict = {"train_file": train.summary(), "train_skipped": dict(train.skipped)}
    _log_rows("training", train)
    if config.heldout is None:
        train_rows, held_rows = split_by_problem(train.rows, config.heldout_fraction, config.split_seed)
        return train_rows, held_rows, report
    held = read_source(config.heldout, config.labels)
    _log_rows("held-out", held)
    problems = {row.problem for row in train.rows}
    held_rows = [row for row in held.rows if row.problem not in problems]
    report.update(
        heldout_file=held.summary(),
        heldout_skipped=dict(held.skipped),
        heldout_overlap_dropped=len(held.rows) - len(held_rows),
    )
    if not held_rows:
        raise ConfigError(f"every held-out row's problem is also a training problem ({len(held.rows)} rows)")
    return train.rows, held_rows, report


def _log_rows(side: str, rows: StepRows) -> None:
    log.info("%s rows: %s", side, rows.summary())
    if rows.skipped:
        log.warning("%s rows skipped, first ones: %s", side, "; ".join(rows.examples))


def render_all(fmt: VerifierFormat, rows: Sequence[StepRow], max_tokens: int) -> tuple[list[RenderedRow], int]:
    """Rendered rows with at least one scored step and at most ``max_tokens`` ids; and how many were dropped."""
    kept = [
        r
        for r in (fmt.render(row) for row in rows)
        if len(r.ids) <= max_tokens and any(y is not None for y in r.labels)
    ]
    return kept, len(rows) - len(kept)


def collate(rows: Sequence[RenderedRow], device: str) -> dict[str, torch.Tensor]:
    """Right-padded ids (B, T), attention mask (B, T), slots (B, K), labels (B, K), slot mask (B, K)."""
    width = max(len(r.ids) for r in rows)
    slots = max(len(r.positions) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    attention = torch.zeros(len(rows), width, dtype=torch.long)
    positions = torch.zeros(len(rows), slots, dtype=torch.long)
    labels = torch.zeros(len(rows), slots, dtype=torch.long)
    mask = torch.zeros(len(rows), slots, dtype=torch.bool)
    for b, row in enumerate(rows):
        ids[b, : len(row.ids)] = torch.tensor(row.ids)
        attention[b, : len(row.ids)] = 1
        for k, (position, label) in enumerate(zip(row.positions, row.labels)):
            positions[b, k] = position
            labels[b, k] = 0 if label is None else label
            mask[b, k] = label is not None
    batch = {"ids": ids, "attention": attention, "positions": positions, "labels": labels, "mask": mask}
    return {key: value.to(device) for key, value in batch.items()}


def pair_logits(model, batch: dict[str, torch.Tensor], label_ids: tuple[int, int]) -> torch.Tensor:  # (B, K, 2)
    return label_pair_logits(model, batch["ids"], batch["attention"], batch["positions"], label_ids)


@torch.no_grad()
def predict(model, rows: Sequence[RenderedRow], label_ids: tuple[int, int], batch_size: int, device: str):
    """p(correct) of every scored slot, in row order, with its label and step index: list of (p, y, k)."""
    was_training = model.training
    model.eval()
    found = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        probs = correct_probability(pair_logits(model, collate(chunk, device), label_ids)).cpu()  # (B, K)
        for b, row in enumerate(chunk):
            found += [(float(probs[b, k]), y, k) for k, y in enumerate(row.labels) if y is not None]
    model.train(was_training)
    return found


def baselines(train: Sequence[RenderedRow], slots: Sequence[tuple[float, int, int]]) -> dict:
    """The constant and step-index baselines on held-out ``slots`` (p, y, k), fitted on ``train``."""
    counts: dict[int, Counter] = defaultdict(Counter)
    for row in train:
        for k, y in enumerate(row.labels):
            if y is not None:
                counts[k][y] += 1
    total = sum((c for c in counts.values()), Counter())
    majority = 1 if total[1] >= total[0] else 0
    labels = [y for _, y, _ in slots]
    prior = [(counts[k][1] + 1) / (sum(counts[k].values()) + 2) for _, _, k in slots]  # Laplace-smoothed
    return {
        "constant": {
            "predicts": majority,
            "accuracy": accuracy([float(majority)] * len(labels), labels),
            "auc": 0.5,
        },
        "step_index": {"accuracy": accuracy(prior, labels), "auc": _auc(prior, labels)},
    }


def _auc(scores: Sequence[float], labels: Sequence[int]) -> float | None:
    try:
        return roc_auc(scores, labels)
    except ValueError:  # one class only in the held-out slots
        return None


def report(slots: Sequence[tuple[float, int, int]]) -> dict:
    """Step-level accuracy and AUC of (p, y, k) slots, overall and by step index (1-based)."""
    scores, labels = [p for p, _, _ in slots], [y for _, y, _ in slots]
    by_index: dict[int, list] = defaultdict(list)
    for p, y, k in slots:
        by_index[k + 1].append((p, y))
    return {
        "slots": len(slots),
        "correct_share": sum(labels) / len(labels),
        "accuracy": accuracy(scores, labels),
        "auc": _auc(scores, labels),
        "by_step_index": {
            str(k): {"slots": len(v), "accuracy": accuracy([p for p, _ in v], [y for _, y in v])}
            for k, v in sorted(by_index.items())
        },
    }


def save_checkpoint(model, fmt: VerifierFormat, directory: Path) -> Path:
    """A model directory (`policies.hf_adapter.load_policy` reads it) plus verifier.json."""
    directory.mkdir(parents=True, exist_ok=True)
    save_file(model_tensors(model), str(directory / "model.safetensors"), metadata={"format": "pt"})
    model.config.to_json_file(str(directory / "config.json"))
    (directory / "verifier.json").write_text(json.dumps(fmt.describe(), indent=2) + "\n")
    return directory


def fit(model, fmt: VerifierFormat, train: list[RenderedRow], held: list[RenderedRow], config: VerifierConfig) -> list:
    """``config.steps`` AdamW steps of the label loss on random training batches; the held-out curve."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / max(1, config.warmup_steps)))
    rng = random.Random(config.seed)
    curve = []
    with progress(config.steps, "verifier", "step", enabled=config.progress) as bar:
        for step in range(1, config.steps + 1):
            batch = collate(rng.sample(train, min(config.batch_size, len(train))), config.device)
            loss = verifier_loss(pair_logits(model, batch, fmt.label_ids), batch["labels"], batch["mask"])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            optimizer.step()
            warmup.step()
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.3f}")
            if step % config.eval_every == 0 or step == config.steps:
                held_report = report(predict(model, held, fmt.label_ids, config.eval_batch_size, config.device))
                curve.append(
                    {"step": step, "loss": loss.item(), "accuracy": held_report["accuracy"], "auc": held_report["auc"]}
                )
                auc = "n/a" if held_report["auc"] is None else f"{held_report['auc']:.4f}"
                log.info(
                    "step %d: loss %.4f, held-out accuracy %.4f, AUC %s",
                    step,
                    loss.item(),
                    held_report["accuracy"],
                    auc,
                )
    return curve


def train_verifier(config: VerifierConfig) -> dict:
    """Run the whole training with ``config.threads`` torch threads (the caller's count is restored after);
    returns the metrics written to ``out/metrics.json``."""
    before = torch.get_num_threads()
    torch.set_num_threads(config.threads or before)
    try:
        return _train(config)
    finally:
        torch.set_num_threads(before)


def _train(config: VerifierConfig) -> dict:
    started = time.monotonic()
    fmt = VerifierFormat(load_tokenizer(config.tokenizer), config.label_texts.correct, config.label_texts.wrong)
    train_rows, held_rows, data = splits(config)
    train, dropped_train = render_all(fmt, train_rows, config.max_tokens)
    held, dropped_held = render_all(fmt, held_rows, config.max_tokens)
    if not train or not held:
        raise ConfigError(f"{len(train)} training and {len(held)} held-out rows left after rendering; need both")
    data.update(train_rows=len(train), heldout_rows=len(held), too_long_or_unscored=dropped_train + dropped_held)
    model = build_model(config.policy, config.dtype, config.device).train()
    vocab = int(model.config.vocab_size)
    if fmt.tokenizer.vocab_size > vocab:
        raise ConfigError(f"tokenizer {config.tokenizer} has {fmt.tokenizer.vocab_size} ids, the policy embeds {vocab}")
    curve = fit(model, fmt, train, held, config)
    slots = predict(model, held, fmt.label_ids, config.eval_batch_size, config.device)
    checkpoint = save_checkpoint(model, fmt, config.out / "checkpoint")
    metrics = {
        "heldout": {"model": report(slots), **baselines(train, slots)},
        "data": data,
        "curve": curve,
        "labels": {"correct": [fmt.correct_text, fmt.correct_id], "wrong": [fmt.wrong_text, fmt.wrong_id]},
        "checkpoint": str(checkpoint),
        "steps": config.steps,
        "wall_s": round(time.monotonic() - started, 1),
        "torch_threads": torch.get_num_threads(),
    }
    (config.out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    return metrics
