"""Fish Speech S2 Pro's export against the vLLM-Omni 0.30.0 reference (tests/fish_speech_reference.py) on the tiny
checkpoint: the exported graphs (slow_step, fast_step, dac_encode, dac_stream) run by tests/fish_speech_loop.py
over ttscore.runtime.families.fish_speech.artifacts, the reference fed the same sampling noise (our runtime's,
drawn from the request's seed): the same codes exactly, audio within AUDIO_TOLERANCE, text-only and cloned; the
streamed decode equals the whole one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fish_speech_fixtures import *  # noqa: F403  (fish_tiny, fish_artifacts)
from fish_speech_fixtures import reference_with_our_noise

pytestmark = pytest.mark.export

AUDIO_TOLERANCE = 1e-4  # max abs sample error vs the reference (float32 both sides; tiny: ~1e-7)


def _clip() -> np.ndarray:
    n = np.arange(33000)
    return (0.25 * np.sin(n * 0.031) + 0.1 * np.sin(n * 0.27)).astype(np.float32)


def test_export_matches_reference(fish_tiny: Path, fish_artifacts: Path) -> None:
    from fish_speech_loop import synthesize

    from ttscore.runtime.families.fish_speech.artifacts import FishArtifacts

    art = FishArtifacts(fish_artifacts)
    reqs = [{"text": "Hello world, this is a test.", "max_new_tokens": 10, "seed": 11},
            {"text": "Cloned speech.", "max_new_tokens": 8, "seed": 12, "ref_text": "A reference clip.",
             "temperature": 0.6, "top_k": 10, "top_p": 0.95}]
    ref, inputs = reference_with_our_noise(fish_tiny, reqs, _clip())
    frames = 0
    for i, r in enumerate(reqs):
        got, ref_codes = synthesize(art, r["text"], max_new_tokens=r["max_new_tokens"], seed=r["seed"],
                                    temperature=r.get("temperature", 0.8), top_k=r.get("top_k", 30),
                                    top_p=r.get("top_p", 0.9),
                                    ref_audio=inputs.get(f"ref_audio_{i}"), ref_text=r.get("ref_text"))
        if ref_codes is not None:
            np.testing.assert_array_equal(ref_codes, ref[f"ref_codes_{i}"])
        np.testing.assert_array_equal(got.codes, ref[f"codes_{i}"])
        assert got.stopped == bool(ref[f"stopped_{i}"])
        whole = art.decode(got.codes)
        np.testing.assert_allclose(whole, ref[f"audio_{i}"], atol=AUDIO_TOLERANCE, rtol=0)
        n = len(got.codes)
        if n >= 3:
            streamed = art.decode(got.codes, [1, 2, n - 3])
            np.testing.assert_allclose(streamed, whole, atol=1e-6, rtol=0)
        frames += n
    assert frames >= 8
