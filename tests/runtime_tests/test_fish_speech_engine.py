"""Fish Speech S2 Pro under the shared engine (ttscore.runtime.engine.Generator over
ttscore.runtime.families.fish_speech.model.FishModel on the tiny export): three requests batched together
(text-only, cloned, other sampling knobs) give the reference's codes exactly and its audio within
AUDIO_TOLERANCE, the reference fed the noise of each request's seed; the audio streamed in chunks equals the whole
decode of the same codes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fish_speech_fixtures import *  # noqa: F403  (fish_tiny, fish_artifacts)
from fish_speech_fixtures import reference_with_our_noise

pytestmark = pytest.mark.export

AUDIO_TOLERANCE = 1e-4
STREAM_TOLERANCE = 1e-6


def test_engine_matches_reference_and_streams_exactly(fish_tiny: Path, fish_artifacts: Path) -> None:
    from ttscore.runtime.engine import Generator
    from ttscore.runtime.families.fish_speech.model import FishModel, FishRequest

    n = np.arange(28000)
    clip = (0.2 * np.sin(n * 0.045) + 0.05 * np.sin(n * 0.31)).astype(np.float32)
    reqs = [{"text": "Streaming speech from the engine.", "max_new_tokens": 13, "seed": 31},
            {"text": "A cloned voice.", "max_new_tokens": 9, "seed": 32, "ref_text": "The reference."},
            {"text": "Cooler sampling.", "max_new_tokens": 11, "seed": 33, "temperature": 0.5, "top_k": 5,
             "top_p": 0.7}]
    model = FishModel(fish_artifacts)
    gen = Generator(model, max_batch=4)
    for i, r in enumerate(reqs):
        gen.submit(f"r{i}", FishRequest(text=r["text"], ref_audio=clip if "ref_text" in r else None,
                                        ref_text=r.get("ref_text"), max_new_tokens=r["max_new_tokens"],
                                        seed=r["seed"], temperature=r.get("temperature"), top_k=r.get("top_k"),
                                        top_p=r.get("top_p"), initial_chunk_frames=2, chunk_frames=3))
    pcm: dict[str, list[np.ndarray]] = {f"r{i}": [] for i in range(len(reqs))}
    codes: dict[str, list[np.ndarray]] = {f"r{i}": [] for i in range(len(reqs))}
    chunks: dict[str, int] = {f"r{i}": 0 for i in range(len(reqs))}
    while gen.num_active:
        for ev in gen.step():
            pcm[ev.req_id].append(ev.pcm)
            if ev.codes is not None:
                codes[ev.req_id].append(ev.codes)
            chunks[ev.req_id] += 1
    ref, _ = reference_with_our_noise(fish_tiny, reqs, clip)
    for i in range(len(reqs)):
        audio = np.concatenate(pcm[f"r{i}"])
        want = ref[f"audio_{i}"]
        assert chunks[f"r{i}"] >= 2 and len(want) > 0
        np.testing.assert_allclose(audio, want, atol=AUDIO_TOLERANCE, rtol=0)
        np.testing.assert_array_equal(np.concatenate(codes[f"r{i}"]), ref[f"codes_{i}"])
        whole = model.a.decode(ref[f"codes_{i}"])
        np.testing.assert_allclose(audio, whole, atol=STREAM_TOLERANCE, rtol=0)
