"""The search's ``--hyper-input applied``: the applied-slot input and its exact expectation under lambda."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hba_augment import functional as F
from hba_augment.search.hparams import NUM_HPARAMS, NUM_PROB_HPARAMS, hparams_to_policy
from hba_augment.search.hyper_input import applied_input, applied_probability, expected_applied_input

COUNT_PROBS = [(0.2, 0.3, 0.5), (0.0, 1.0), (0.1, 0.2, 0.3, 0.4)]


def _count_law(p: np.ndarray) -> np.ndarray:
    """Law of the number of fired slots (all 30), by the product of the slots' generating functions."""
    law = np.array([1.0])
    for q in p:
        law = np.convolve(law, [1.0 - q, q])
    return law


@pytest.mark.parametrize("count_probs", COUNT_PROBS)
def test_matches_the_sampler(count_probs):
    # 100,000 images through functional.augment: every slot's applied fraction within 5 standard errors.
    g = torch.Generator().manual_seed(0)
    prob = torch.rand(2, F.NUM_OPS, generator=g) * 0.4
    prob[0, 0], prob[1, 4] = 0.95, 0.0
    mag = torch.tensor([[s.low if s.has_magnitude else float("nan") for s in F.OPS]] * 2)
    images = torch.zeros(100_000, 1, 1, 1, dtype=torch.uint8)
    _, applied = F.augment(images, prob, mag, count_probs, generator=g, return_applied=True)
    sampled = applied.double().mean(0)
    exact = applied_probability(prob.double(), count_probs)
    se = (exact * (1 - exact) / len(images)).sqrt().clamp_min(1e-5)
    assert float(((sampled - exact) / se).abs().max()) < 5
    assert exact[1, 4] == 0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=30, max_size=30), st.sampled_from(COUNT_PROBS))
def test_total_is_the_expected_number_of_ops(p, count_probs):
    # Summed over slots, the applied probabilities are E[min(K, F)] with F the number of fired slots: a
    # count computed another way (all 30 slots at once, no slot singled out).
    prob = torch.tensor(p, dtype=torch.float64)
    applied = applied_probability(prob, count_probs)
    assert bool(((applied >= 0) & (applied <= prob + 1e-12)).all())
    law = _count_law(np.array(p))
    f = np.arange(len(law))
    total = sum(w * float(np.sum(law * np.minimum(k, f))) for k, w in enumerate(count_probs))
    assert float(applied.sum()) == pytest.approx(total, abs=1e-9)


def test_one_certain_slot_is_applied_whenever_k_allows():
    prob = torch.zeros(2, F.NUM_OPS, dtype=torch.float64)
    prob[1, 6] = 1.0
    applied = applied_probability(prob, (0.2, 0.3, 0.5))
    assert float(applied[1, 6]) == pytest.approx(0.8) and float(applied.sum()) == pytest.approx(0.8)


def test_gradient():
    lam = torch.randn(NUM_HPARAMS, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) - 2
    assert torch.autograd.gradcheck(lambda h: expected_applied_input(h, (0.2, 0.3, 0.5)), (lam.requires_grad_(),))


def test_expected_input_is_the_mean_training_input():
    # Images drawn at lambda itself (sigma 0): the mean of their applied_input is expected_applied_input,
    # slot by slot, magnitudes included (the same layout on both sides of the search).
    g = torch.Generator().manual_seed(2)
    lam = torch.randn(NUM_HPARAMS, generator=g) - 1.5
    n = 100_000
    prob, mag = hparams_to_policy(lam)
    _, applied = F.augment(torch.zeros(n, 1, 1, 1, dtype=torch.uint8), prob, mag, generator=g, return_applied=True)
    mean = applied_input(applied, lam.expand(n, -1)).double().mean(0)
    expected = expected_applied_input(lam.double(), (0.2, 0.3, 0.5))
    fired = expected[:NUM_PROB_HPARAMS]
    se = torch.cat([(fired * (1 - fired) / n).sqrt(), (expected[NUM_PROB_HPARAMS:] / n).sqrt()]).clamp_min(1e-5)
    assert float(((mean - expected) / se).abs().max()) < 5


def test_applied_input_layout():
    applied = torch.zeros(2, 2, F.NUM_OPS, dtype=torch.bool)
    applied[0, 1, F.OP_NAMES.index("Rotate")] = True
    applied[1, 0, F.OP_NAMES.index("Invert")] = True
    lam = torch.zeros(2, NUM_HPARAMS)
    z = applied_input(applied, lam)
    assert z.shape == (2, NUM_HPARAMS)
    assert z[0, :NUM_PROB_HPARAMS].nonzero().flatten().tolist() == [F.NUM_OPS + F.OP_NAMES.index("Rotate")]
    assert z[1, :NUM_PROB_HPARAMS].nonzero().flatten().tolist() == [F.OP_NAMES.index("Invert")]
    # Rotate's copy-1 magnitude (sigmoid(0) = half its range); Invert has no magnitude.
    mags = z[:, NUM_PROB_HPARAMS:]
    rotate = len(F.MAGNITUDE_OPS) + F.MAGNITUDE_OPS.index(F.OP_NAMES.index("Rotate"))
    assert mags[0].nonzero().flatten().tolist() == [rotate] and float(mags[0, rotate]) == 0.5
    assert not mags[1].any()


@pytest.mark.parametrize(("call", "match"), [
    (lambda: applied_input(torch.zeros(2, 30, dtype=torch.bool), torch.zeros(2, 54)), "applied must be"),
    (lambda: applied_input(torch.zeros(2, 2, 15), torch.zeros(2, 54)), "applied must be"),
    (lambda: applied_input(torch.zeros(2, 2, 15, dtype=torch.bool), torch.zeros(3, 54)), "hparams must have"),
    (lambda: applied_probability(torch.zeros(29), (0.2, 0.8)), "prob must hold 30"),
    (lambda: applied_probability(torch.zeros(30), (0.2, 0.7)), "count_probs"),
    (lambda: expected_applied_input(torch.zeros(2, 54), (0.2, 0.8)), "hparams must have shape \\(54,\\)"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
