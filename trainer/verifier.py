"""The step-level verifier's loss and metrics as pure functions: the label cross-entropy, accuracy and AUC.

A causal LM becomes a process verifier by reading its next-token logits at each step's label slot
(gym/format/verifier.py) restricted to two label tokens, (correct, wrong)::

    z_{b,k}   = logits[b, pos_{b,k}, (correct_id, wrong_id)]              (B, K, 2)
    p_{b,k}   = softmax(z_{b,k})[0] = sigmoid(z_correct - z_wrong)           p(correct), the score
    loss      = mean over scored slots of  -log softmax(z_{b,k})[y_{b,k}]    y = 0 correct, 1 wrong

i.e. cross-entropy on the label slots only (every other position carries no loss), over the two
label tokens as OpenRLHF's PRM loss does with its reward tokens. Slots are padded to K per row;
``mask`` marks the real, scored ones. ``z`` and ``p`` come from `policies.scorer` (label_pair_logits,
correct_probability), which the server's ``/v1/score`` runs too.

`roc_auc` and `accuracy` are plain Python over lists, so the metrics never depend on torch.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F


def verifier_loss(
    pair: torch.Tensor,  # (B, K, 2) from policies.scorer.label_pair_logits
    labels: torch.Tensor,  # (B, K) long: 1 correct, 0 wrong (any value where mask is False)
    mask: torch.Tensor,  # (B, K) bool: a real, scored slot
) -> torch.Tensor:  # scalar
    """Mean two-way cross-entropy over the scored slots (0 when there is none, still in the graph)."""
    target = (labels == 0).long()  # class 0 is the correct label token, class 1 the wrong one
    per_slot = F.cross_entropy(pair.reshape(-1, 2).float(), target.reshape(-1), reduction="none")  # (B*K,)
    weights = mask.reshape(-1).float()
    return (per_slot * weights).sum() / weights.sum().clamp(min=1.0)


def accuracy(scores: Sequence[float], labels: Sequence[int], threshold: float = 0.5) -> float:
    """Share of slots where ``score >= threshold`` agrees with ``label == 1``."""
    if not labels:
        raise ValueError("accuracy of no slots")
    return sum((s >= threshold) == (y == 1) for s, y in zip(scores, labels, strict=True)) / len(labels)


def roc_auc(scores: Sequence[float], labels: Sequence[int]) -> float:
    """Area under the ROC curve of ``scores`` for the positive class ``label == 1``.

    The Mann-Whitney form: the probability that a random positive scores above a random negative,
    a tie counting one half::

        AUC = (sum of the positives' ranks - P (P + 1) / 2) / (P N)

    with ranks 1..n by ascending score and tied scores sharing their mean rank. A constant score
    gives 0.5; a perfect ranking 1.0. ValueError when either class is absent (the AUC is undefined).
    """
    pairs = sorted(zip(scores, labels, strict=True), key=lambda pair: pair[0])
    positives = sum(1 for _, y in pairs if y == 1)
    negatives = len(pairs) - positives
    if positives == 0 or negatives == 0:
        raise ValueError(f"AUC needs both classes ({positives} positive, {negatives} negative slots)")
    rank_sum, start = 0.0, 0
    while start < len(pairs):
        end = start
        while end < len(pairs) and pairs[end][0] == pairs[start][0]:
            end += 1
        mean_rank = (start + 1 + end) / 2  # ranks start+1 .. end share their mean
        rank_sum += mean_rank * sum(1 for _, y in pairs[start:end] if y == 1)
        start = end
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)
