"""A process verifier behind the server's ``POST /v1/score``: token ids in, p(correct) per label slot out.

A verifier checkpoint (written by ``python -m gym verifier``, trainer/verifier_train.py) is a model
directory plus ``verifier.json``: the two label ids ``[correct, wrong]`` and the slot rule
(``step_prefix``: the ids of ``<|start|>assistant``; ``step_end_id``: ``<|end|>``). A slot is a
position whose next-token logits, restricted to the two label ids, rate the step that ends there::

    p(correct) = softmax(logits[pos, (correct_id, wrong_id)])[0]

Only the slots go through the LM head: the decoder's hidden states are gathered at the slots first
(a (B, K, V) head instead of (B, T, V)), in training and serving alike, so both compute the same
function; serving keeps only the head's two label rows (`label_rows_logits`: a (B, K, 2) head).
Explicit positions must be distinct and inside their sequence. Without explicit positions, the slots of a sequence are the ``<|end|>`` of every message
that opens with ``<|start|>assistant`` (gym/format/verifier.py renders rows that way).
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict, Field

from policies.protocol import MAX_LISTS, MAX_TOKEN_IDS, bounded, token_id_list

log = logging.getLogger(__name__)


class ScoreError(ValueError):
    """A score request this verifier cannot serve (the server answers 400 with this message)."""


class ScoreRequest(BaseModel):
    """``POST /v1/score``: one or many token-id sequences and, optionally, the positions to score."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_ids: bounded(token_id_list(MAX_TOKEN_IDS), MAX_LISTS, min_length=1) = Field(  # type: ignore[valid-type]
        description="token-id sequences (no text)"
    )
    positions: bounded(token_id_list(MAX_TOKEN_IDS), MAX_LISTS) | None = Field(  # type: ignore[valid-type]
        None,
        description="per sequence, the distinct positions to score; leave out to score every step's <|end|>",
    )


class ScoreResponse(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    object: str = "score"
    model: str
    positions: list[list[int]] = Field(description="per sequence, the positions scored")
    scores: list[list[float]] = Field(description="per sequence, p(correct) at each position")
    label_ids: list[int] = Field(description="[correct, wrong]: the two label token ids")


def slot_positions(ids: list[int], step_prefix: list[int], end_id: int) -> list[int]:
    """Positions of ``end_id`` that close a message opening with ``step_prefix`` (``<|start|>assistant``).

    A message opens at ``step_prefix[0]`` (``<|start|>``); an ``end_id`` closes the message open at that point."""
    found, in_step = [], False
    for index, token in enumerate(ids):
        if token == step_prefix[0]:
            in_step = ids[index : index + len(step_prefix)] == step_prefix
        elif token == end_id and in_step:
            found.append(index)
            in_step = False
    return found


def label_pair_logits(
    model,  # a transformers causal LM: base_model -> hidden states, get_output_embeddings -> the LM head
    ids: torch.Tensor,  # (B, T) right-padded
    attention: torch.Tensor,  # (B, T) 1 = real token
    positions: torch.Tensor,  # (B, K) long, padded with any valid index
    label_ids: tuple[int, int],  # (correct, wrong)
) -> torch.Tensor:  # (B, K, 2)
    """The two label logits at each slot; the LM head runs on the slots' hidden states only."""
    hidden = model.base_model(input_ids=ids, attention_mask=attention).last_hidden_state  # (B, T, H)
    batch = torch.arange(ids.shape[0], device=ids.device)[:, None]  # (B, 1)
    logits = model.get_output_embeddings()(hidden[batch, positions])  # (B, K, V)
    return logits[..., list(label_ids)]


def label_rows_logits(
    model,
    ids: torch.Tensor,  # (B, T) right-padded
    attention: torch.Tensor,  # (B, T)
    positions: torch.Tensor,  # (B, K)
    label_ids: tuple[int, int],
) -> torch.Tensor:  # (B, K, 2)
    """`label_pair_logits` with the LM head's two label rows only: the same two logits a slot, without the (B, K, V)
    logits (a request of many positions asked for gigabytes of them) and without a KV cache. The server's path."""
    head = model.get_output_embeddings()
    if not isinstance(head, torch.nn.Linear):  # a head that is more than a matrix: the full one
        return label_pair_logits(model, ids, attention, positions, label_ids)
    hidden = model.base_model(input_ids=ids, attention_mask=attention, use_cache=False).last_hidden_state
    batch = torch.arange(ids.shape[0], device=ids.device)[:, None]  # (B, 1)
    rows = list(label_ids)
    bias = None if head.bias is None else head.bias[rows]
    return torch.nn.functional.linear(hidden[batch, positions], head.weight[rows], bias)


def correct_probability(pair: torch.Tensor) -> torch.Tensor:  # (..., 2) -> (...)
    """p(correct) normalised over the two label tokens: softmax(pair)[..., 0]."""
    return torch.softmax(pair.float(), dim=-1)[..., 0]


class StepScorer:
    """A loaded verifier checkpoint; `score` is thread-safe (one forward at a time)."""

    def __init__(self, model, meta: dict, name: str) -> None:
        self.model = model.eval()
        self.name = name
        self.label_ids: tuple[int, int] = tuple(meta["label_ids"])  # type: ignore[assignment]
        self.step_prefix: list[int] = list(meta["step_prefix"])
        self.end_id: int = int(meta["step_end_id"])
        self.vocab_size = int(model.config.vocab_size)
        self.context_length = int(getattr(model.config, "max_position_embeddings", 2048))
        self._lock = threading.Lock()

    @classmethod
    def load(cls, path: str | Path, device: str = "cpu") -> StepScorer:
        """The checkpoint directory ``path`` (config.json, model.safetensors, verifier.json); errors name the file."""
        from policies.hf_adapter import load_policy

        path = Path(path)
        meta_file = path / "verifier.json"
        try:
            meta = json.loads(meta_file.read_text(encoding="utf-8"))
            for key in ("label_ids", "step_prefix", "step_end_id"):
                meta[key]  # noqa: B018  (a KeyError names the missing key)
        except (OSError, ValueError, KeyError) as exc:
            raise FileNotFoundError(
                f"{meta_file}: not a verifier checkpoint ({type(exc).__name__}: {exc}); "
                "write one with `python -m gym verifier CONFIG`"
            ) from None
        policy = load_policy(path, device=device)
        log.info("verifier %s: label ids %s", path, meta["label_ids"])
        return cls(policy.model, meta, name=path.name)

    def resolve(self, request: ScoreRequest, max_sequences: int) -> list[list[int]]:
        """The positions to score per sequence; ScoreError for a request that cannot be served."""
        if len(request.input_ids) > max_sequences:
            raise ScoreError(f"{len(request.input_ids)} sequences in one request; at most {max_sequences}")
        if request.positions is not None and len(request.positions) != len(request.input_ids):
            raise ScoreError(f"{len(request.positions)} position lists for {len(request.input_ids)} sequences")
        found = []
        for index, ids in enumerate(request.input_ids):
            where = f"input_ids[{index}]"
            if not ids:
                raise ScoreError(f"{where} is empty")
            if len(ids) > self.context_length:
                raise ScoreError(f"{where} has {len(ids)} tokens; the verifier's context is {self.context_length}")
            bad = [t for t in ids if not 0 <= t < self.vocab_size]
            if bad:
                raise ScoreError(f"{where}: token id {bad[0]} is outside the vocabulary [0, {self.vocab_size})")
            positions = slot_positions(ids, self.step_prefix, self.end_id)
            if request.positions is not None:
                positions = request.positions[index]
                wrong = [p for p in positions if not 0 <= p < len(ids)]
                if wrong:
                    raise ScoreError(f"positions[{index}]: {wrong[0]} is outside the sequence [0, {len(ids)})")
                if len(set(positions)) != len(positions):  # each repeat would be scored (and paid for) again
                    seen: set[int] = set()
                    again = next(p for p in positions if p in seen or seen.add(p))  # type: ignore[func-returns-value]
                    raise ScoreError(f"positions[{index}] repeats position {again}: give each position once")
            found.append(positions)
        return found

    @torch.no_grad()
    def score(self, sequences: list[list[int]], positions: list[list[int]]) -> list[list[float]]:
        """p(correct) at each position of each sequence (one batched forward)."""
        device = next(self.model.parameters()).device
        width, slots = max(len(s) for s in sequences), max(1, max(len(p) for p in positions))
        ids = torch.zeros(len(sequences), width, dtype=torch.long)
        attention = torch.zeros_like(ids)
        where = torch.zeros(len(sequences), slots, dtype=torch.long)
        for b, (seq, pos) in enumerate(zip(sequences, positions)):
            ids[b, : len(seq)] = torch.tensor(seq)
            attention[b, : len(seq)] = 1
            where[b, : len(pos)] = torch.tensor(pos, dtype=torch.long)
        with self._lock:
            pair = label_rows_logits(self.model, ids.to(device), attention.to(device), where.to(device), self.label_ids)
            probs = correct_probability(pair).cpu()  # (B, K)
        return [[float(probs[b, k]) for k in range(len(pos))] for b, pos in enumerate(positions)]
