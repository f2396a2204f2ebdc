"""code0 sampling against the Hugging Face logits processors the reference talker uses."""

from __future__ import annotations

import numpy as np
import pytest

from ttscore.runtime.sampling import process_logits, sample, suppress_mask

torch = pytest.importorskip("torch")
gen_utils = pytest.importorskip("transformers.generation.logits_process")

V, EOS = 3072, 2150


def hf_scores(logits, history, penalty, n_generated, temperature=None, top_k=None, top_p=None):
    lp = gen_utils
    procs = lp.LogitsProcessorList(
        [
            lp.RepetitionPenaltyLogitsProcessor(penalty),
            lp.MinNewTokensLengthLogitsProcessor(0, 2, EOS),
            lp.SuppressTokensLogitsProcessor(
                [i for i in range(V - 1024, V) if i != EOS], device="cpu"
            ),
        ]
    )
    if temperature is not None:
        procs.append(lp.TemperatureLogitsWarper(temperature))
    if top_k:
        procs.append(lp.TopKLogitsWarper(top_k))
    if top_p is not None and top_p < 1.0:
        procs.append(lp.TopPLogitsWarper(top_p))
    ids = torch.tensor([history + [0] * 0], dtype=torch.long).reshape(1, -1)
    # MinNewTokens counts tokens after the prompt; with an empty prompt that is len(history).
    assert ids.shape[1] == n_generated
    return procs(ids, torch.tensor(logits[None], dtype=torch.float32))[0].numpy()


@pytest.mark.unit
@pytest.mark.parametrize("n_generated", [0, 1, 5])
def test_greedy_matches_hf_processors(n_generated):
    rng = np.random.default_rng(n_generated)
    for _ in range(20):
        logits = rng.normal(size=V).astype(np.float32) * 3
        history = rng.integers(0, 2048, size=n_generated).tolist()
        ours = process_logits(logits, np.array(history, np.int64), 1.05, suppress_mask(V, EOS), EOS, n_generated)
        ref = hf_scores(logits, history, 1.05, n_generated)
        np.testing.assert_allclose(ours, ref, rtol=1e-6)
        assert sample(ours, False, 1.0, 0, 1.0, 0.5) == int(np.argmax(ref))


@pytest.mark.unit
def test_eos_allowed_only_after_two_codes():
    logits = np.zeros(V, np.float32)
    logits[EOS] = 100.0
    m = suppress_mask(V, EOS)
    assert sample(process_logits(logits, np.array([], np.int64), 1.0, m, EOS, 0), False, 1, 0, 1, 0) != EOS
    assert sample(process_logits(logits, np.array([1, 2]), 1.0, m, EOS, 2), False, 1, 0, 1, 0) == EOS
    # every other special id stays suppressed
    logits2 = np.zeros(V, np.float32)
    logits2[2154] = 100.0
    assert sample(process_logits(logits2, np.array([1, 2]), 1.0, m, EOS, 2), False, 1, 0, 1, 0) != 2154


@pytest.mark.unit
@pytest.mark.parametrize("temperature,top_k,top_p", [(0.9, 50, 1.0), (0.7, 0, 0.8), (1.3, 10, 0.5)])
def test_sampling_distribution_matches_hf_warpers(temperature, top_k, top_p):
    rng = np.random.default_rng(7)
    logits = (rng.normal(size=V) * 2).astype(np.float32)
    m = suppress_mask(V, EOS)
    scores = process_logits(logits, np.array([3, 4]), 1.05, m, EOS, 2)
    ref = hf_scores(logits, [3, 4], 1.05, 2, temperature, top_k, top_p)
    ref_p = np.exp(ref - ref.max())
    ref_p /= ref_p.sum()
    # The empirical distribution of inverse-CDF draws over a fine grid of u equals HF's probabilities.
    us = (np.arange(20000) + 0.5) / 20000
    counts = np.bincount([sample(scores, True, temperature, top_k, top_p, u) for u in us], minlength=V)
    emp = counts / counts.sum()
    assert set(np.flatnonzero(counts)) <= set(np.flatnonzero(ref_p > 0))
    assert np.abs(emp - ref_p).max() < 2e-3


@pytest.mark.unit
def test_same_uniform_same_code():
    rng = np.random.default_rng(1)
    scores = rng.normal(size=V).astype(np.float32)
    assert sample(scores, True, 0.9, 50, 0.9, 0.3) == sample(scores.copy(), True, 0.9, 50, 0.9, 0.3)


def test_batched_processing_equals_row_by_row():
    from ttscore.runtime.sampling import process_logits_batch

    rng = np.random.default_rng(3)
    V, EOS = 3072, 2150
    logits = rng.standard_normal((4, V)).astype(np.float32) * 3
    histories = [[], [5, 9, 5], [EOS - 1], list(rng.integers(0, 2048, 30))]
    penalty = np.array([1.05, 1.3, 1.0, 0.9], np.float32)
    seen = np.zeros((4, V), bool)
    for r, h in enumerate(histories):
        seen[r, h] = True
    m = suppress_mask(V, EOS)
    got = process_logits_batch(logits, seen, penalty, m, EOS, np.array([len(h) for h in histories]))
    for r, h in enumerate(histories):
        want = process_logits(logits[r], np.array(h, np.int64), float(penalty[r]), m, EOS, len(h))
        np.testing.assert_array_equal(got[r], want)
