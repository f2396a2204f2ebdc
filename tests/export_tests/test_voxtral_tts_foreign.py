"""A Voxtral TTS checkpoint the project did not create (tests/voxtral_tts_foreign.py: vLLM-Omni 0.30.0's
own modules and transformers' MistralModel with their own init, the codec encoder included, other
dimensions, n_decoding_steps 4, 50 special tokens, other voices) passes the strict reader, exports, and
through the shared engine matches the reference for both its voices: prompt ids, semantic and acoustic
codes exactly, streamed audio within 1e-4."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from voxtral_tts_fixtures import VLLM_OMNI_WHEEL, reference

from ttscore.runtime.families.voxtral_tts.flow import frame_noise
from ttscore.runtime.families.voxtral_tts.request import VoxtralRequest

pytestmark = [pytest.mark.export, pytest.mark.parity]

SCRIPT = Path(__file__).resolve().parents[1] / "voxtral_tts_foreign.py"
# The first ends on [END_AUDIO] after 7 frames, the second runs to its budget.
CASES = [VoxtralRequest(text="Ahlan wa sahlan", voice="ar_male", max_new_tokens=12, seed=21, cfg_alpha=1.2),
         VoxtralRequest(text="Bonjour à tous", voice="fr_female", max_new_tokens=12, seed=22, cfg_alpha=1.2)]


@pytest.fixture(scope="module")
def foreign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import refenv

    if VLLM_OMNI_WHEEL is None:
        refenv.missing("the vllm-omni 0.30.0 wheel (make setup downloads it into .venv-ref5/wheels/)")
    out = tmp_path_factory.mktemp("voxtral_foreign") / "checkpoint"
    refenv.run(refenv.env_for("voxtral_tts"), SCRIPT, {}, [str(VLLM_OMNI_WHEEL), str(out)])
    return out


def test_foreign_checkpoint_matches_reference(foreign: Path, tmp_path: Path) -> None:
    from export.exporter import export_checkpoint
    from ttscore.runtime.engine import Generator
    from ttscore.runtime.families import load_model
    from ttscore.runtime.families.voxtral_tts.checkpoint import read_checkpoint

    info = read_checkpoint(foreign)
    assert (info.fm.n_decoding_steps, info.fm.steps_given) == (4, True)
    export_checkpoint(foreign, tmp_path / "art")
    model = load_model(tmp_path / "art")
    n_ac = model.num_codebooks - 1
    reqs = [{"text": r.text, "voice": r.voice, "max_new_tokens": r.max_new_tokens, "cfg_alpha": r.cfg_alpha}
            for r in CASES]
    noise = {f"noise_{i}": frame_noise(r.seed or 0, r.max_new_tokens or 0, n_ac) for i, r in enumerate(CASES)}
    ref = reference(foreign, reqs, noise)
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
