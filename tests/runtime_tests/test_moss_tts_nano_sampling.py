"""MOSS-TTS-Nano's batched code sampler (what the runtime runs) equals its one-row sampler (what the parity tests
hold to mlx-audio) row for row, whatever each row's knobs: greedy and sampled, top-k and top-p on and off,
repetition penalties, ties; and the one-row sampler's own rules."""

from __future__ import annotations

import numpy as np
import pytest

from ttscore.runtime.families.moss_tts_nano import sampling

pytestmark = pytest.mark.unit


def test_batched_codes_equal_the_one_row_sampler() -> None:
    rng = np.random.default_rng(0)
    b = 12
    for trial in range(60):
        c = 1024 if trial % 3 == 2 else 64  # the real codebook, where top-k sorts only the kept scores
        logits = (rng.standard_normal((b, c)) * rng.uniform(0.5, 4)).astype(np.float32)
        if trial % 5 == 0:
            logits[:, :8] = logits[:, :1]  # ties
        if trial % 5 == 1:  # ties across the top-k boundary: the first by index are kept
            logits[:, 3:40:3] = logits.max(axis=1, keepdims=True)
        if trial % 7 == 3:
            logits[:, 5:9] = -np.inf
        seen = rng.random((b, c)) < 0.1
        knobs = {"do_sample": rng.random(b) < 0.8, "temperature": rng.uniform(0.3, 2.0, b),
                 "k": rng.choice([0, 1, 5, 13, 25, c - 1, c, c + 3], b), "p": rng.choice([0.3, 0.8, 0.95, 1.0], b),
                 "penalty": rng.choice([1.0, 1.2, 0.7], b), "u": rng.random(b)}
        got = sampling.sample_codes(logits, seen, **knobs)
        for r in range(b):
            want = sampling.sample_code(logits[r], np.flatnonzero(seen[r]), do_sample=bool(knobs["do_sample"][r]),
                                        temperature=float(knobs["temperature"][r]), k=int(knobs["k"][r]),
                                        p=float(knobs["p"][r]), penalty=float(knobs["penalty"][r]),
                                        u=float(knobs["u"][r]))
            assert got[r] == want, (trial, r)


def test_every_row_sampled_at_the_served_knobs_equals_the_one_row_sampler() -> None:
    """The served batch (every row sampled, top-k 25, top-p 0.95, penalty 1.2 over earlier codes: the sampler's
    whole-batch path), with and without ties at the k-th score, row for row the one-row sampler's draws."""
    rng = np.random.default_rng(1)
    b, c = 8, 1024
    for trial in range(24):
        logits = (rng.standard_normal((b, c)) * rng.uniform(0.5, 4)).astype(np.float32)
        if trial % 3 == 1:  # more ties at the k-th value than places left: the first by index are kept
            logits[:, 10:400:10] = np.sort(logits, axis=1)[:, -20:-19]
        if trial % 3 == 2:
            logits = np.round(logits * 4) / 4  # ties everywhere
        seen = rng.random((b, c)) < 0.03
        u = rng.random(b)
        got = sampling.sample_codes(logits, seen, do_sample=np.ones(b, bool), temperature=np.full(b, 0.8),
                                    k=np.full(b, 25), p=np.full(b, 0.95), penalty=np.full(b, 1.2), u=u)
        for r in range(b):
            want = sampling.sample_code(logits[r], np.flatnonzero(seen[r]), do_sample=True, temperature=0.8, k=25,
                                        p=0.95, penalty=1.2, u=float(u[r]))
            assert got[r] == want, (trial, r)


def test_one_row_rules() -> None:
    logits = np.array([2.0, -1.0, 1.0, 0.5], np.float32)
    assert sampling.sample_code(logits, np.array([0]), do_sample=False, temperature=1, k=0, p=1, penalty=1.0,
                                u=0) == 0
    # the penalty divides a positive logit (2 / 3 < 1) and multiplies a negative one
    assert sampling.sample_code(logits, np.array([0]), do_sample=False, temperature=1, k=0, p=1, penalty=3.0,
                                u=0) == 2
    assert sampling.sample_code(logits, np.zeros(0, np.int64), do_sample=True, temperature=1, k=1, p=1,
                                penalty=1.0, u=0.999) == 0  # top-k 1: the largest only
    assert sampling.inverse_cdf(np.array([0.0, 0.0, -np.inf, 0.0]), 0.99) == 3  # -inf never drawn
    assert sampling.inverse_cdf(np.array([0.0, 0.0, 0.0, -np.inf]), 0.99999) == 2
    assert sampling.continues(np.array([1.0, 1.0], np.float32), do_sample=False, temperature=1, k=50, p=1, u=0)
    assert not sampling.continues(np.array([0.0, 1.0], np.float32), do_sample=False, temperature=1, k=50, p=1,
                                  u=0)
