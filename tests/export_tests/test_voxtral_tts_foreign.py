"""A Voxtral TTS checkpoint the project did not create (tests/voxtral_tts_foreign.py: vLLM-Omni 0.30.0's
own modules and transformers' MistralModel with their own init, the codec encoder included, other
dimensions, n_decoding_steps 4, 50 special tokens, other voices) passes the strict reader, exports, and
through the shared engine matches the reference for both its voices: prompt ids, semantic and acoustic
codes exactly, streamed audio within 1e-4."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from voxtral_tts_fixtures import *  # noqa: F403  (voxtral_foreign, voxtral_foreign_artifacts)
from voxtral_tts_fixtures import reference

from ttscore.runtime.families.voxtral_tts.flow import frame_noise
from ttscore.runtime.families.voxtral_tts.request import VoxtralRequest

pytestmark = [pytest.mark.export, pytest.mark.parity]

# The first ends on [END_AUDIO] after 7 frames, the second runs to its budget.
CASES = [VoxtralRequest(text="Ahlan wa sahlan", voice="ar_male", max_new_tokens=12, seed=21, cfg_alpha=1.2),
         VoxtralRequest(text="Bonjour à tous", voice="fr_female", max_new_tokens=12, seed=22, cfg_alpha=1.2)]


def test_foreign_checkpoint_matches_reference(voxtral_foreign: Path, voxtral_foreign_artifacts: Path) -> None:
    from ttscore.runtime.engine import Generator
    from ttscore.runtime.families import load_model
    from ttscore.runtime.families.voxtral_tts.checkpoint import read_checkpoint

    info = read_checkpoint(voxtral_foreign)
    assert (info.fm.n_decoding_steps, info.fm.steps_given) == (4, True)
    model = load_model(voxtral_foreign_artifacts)  # the session's export of it
    n_ac = model.num_codebooks - 1
    reqs = [{"text": r.text, "voice": r.voice, "max_new_tokens": r.max_new_tokens, "cfg_alpha": r.cfg_alpha}
            for r in CASES]
    noise = {f"noise_{i}": frame_noise(r.seed or 0, r.max_new_tokens or 0, n_ac) for i, r in enumerate(CASES)}
    ref = reference(voxtral_foreign, reqs, noise)
    for i, req in enumerate(CASES):
        np.testing.assert_array_equal(model.admit(req).ids, ref[f"prompt_ids_{i}"])
        req.initial_chunk_frames, req.chunk_frames = 2, 3
        events = list(Generator(model, max_batch=1, chunk_policy="fixed").synthesize(req))
        codes = np.concatenate([ev.codes for ev in events])
        want = ref[f"codes_{i}"]
        assert len(want) >= 3 and bool(ref[f"stopped_{i}"]) == (i == 0)
        assert events[-1].finish_reason == ("stop" if i == 0 else "length")
        np.testing.assert_array_equal(codes[:, 0], want[:, 0])
        np.testing.assert_array_equal(codes, want)
        pcm = np.concatenate([ev.pcm for ev in events])
        assert pcm.shape == ref[f"audio_{i}"].shape
        np.testing.assert_allclose(pcm, ref[f"audio_{i}"], atol=1e-4, rtol=0)
