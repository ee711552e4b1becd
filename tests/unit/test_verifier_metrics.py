"""The verifier's pure functions (trainer/verifier.py, policies/scorer.py) on hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from policies.scorer import correct_probability
from trainer.verifier import accuracy, roc_auc, verifier_loss


def test_auc_perfect_reversed_and_constant():
    assert roc_auc([0.1, 0.2, 0.8, 0.9], [0, 0, 1, 1]) == 1.0
    assert roc_auc([0.9, 0.8, 0.2, 0.1], [0, 0, 1, 1]) == 0.0
    assert roc_auc([0.5] * 5, [0, 1, 1, 0, 1]) == 0.5


def test_auc_hand_computed_with_ties():
    # positives 0.8, 0.4, 0.4; negatives 0.4, 0.1: pairs (p, n) = 6
    # 0.8 > both (2); each 0.4 positive ties the 0.4 negative (0.5) and beats 0.1 (1): 1.5 each
    # AUC = (2 + 1.5 + 1.5) / 6 = 5/6
    assert roc_auc([0.8, 0.4, 0.4, 0.4, 0.1], [1, 1, 1, 0, 0]) == pytest.approx(5 / 6)
    # order of the input does not matter
    assert roc_auc([0.1, 0.4, 0.8, 0.4, 0.4], [0, 0, 1, 1, 1]) == pytest.approx(5 / 6)
    # one positive 0.3 against negatives 0.1, 0.3, 0.5: (1 + 0.5 + 0) / 3
    assert roc_auc([0.1, 0.3, 0.5, 0.3], [0, 0, 0, 1]) == pytest.approx(0.5)


def test_auc_needs_both_classes():
    with pytest.raises(ValueError, match="both classes"):
        roc_auc([0.1, 0.2], [1, 1])


def test_accuracy_thresholds_at_one_half():
    assert accuracy([0.9, 0.5, 0.49, 0.1], [1, 1, 1, 0]) == 0.75
    with pytest.raises(ValueError):
        accuracy([], [])


def test_probability_is_the_two_way_softmax():
    pair = torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0], [5.0, 5.0 + math.log(4.0)]])
    assert correct_probability(pair).tolist() == pytest.approx([0.5, 0.75, 0.2])


def test_loss_is_cross_entropy_on_scored_slots_only():
    pair = torch.tensor([[[math.log(3.0), 0.0], [0.0, 0.0], [9.0, -9.0]]])  # (1, 3, 2)
    labels = torch.tensor([[1, 0, 0]])
    mask = torch.tensor([[True, True, False]])
    # slot 0: correct, p = 0.75 -> -log 0.75; slot 1: wrong, p(wrong) = 0.5 -> -log 0.5; slot 2 masked
    expected = (-math.log(0.75) - math.log(0.5)) / 2
    assert verifier_loss(pair, labels, mask).item() == pytest.approx(expected, rel=1e-6)
    none = verifier_loss(pair.requires_grad_(), labels, torch.zeros_like(mask))
    assert none.item() == 0.0 and none.requires_grad
