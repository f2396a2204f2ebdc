"""Voxtral TTS through the shared engine (ttscore.runtime.engine.Generator over VoxtralModel: batched
prefill and steps, the exact streaming codec in chunks of 1 then 3 frames) against the reference
(tests/voxtral_tts_reference.py: vLLM-Omni 0.30.0's modules around transformers' MistralModel), the
request's seeded flow-matching noise fed to the reference, for two preset voices: the prompt ids (tekken
BPE + speech layout) equal, semantic and acoustic codes exactly, streamed audio within 1e-4 of the
reference's whole decode. Also: admission rules, a request's frames independent of its batch, `say`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from voxtral_tts_fixtures import *  # noqa: F403  (voxtral_tiny, voxtral_artifacts)
from voxtral_tts_fixtures import reference

from ttscore.contract.errors import InvalidRequest
from ttscore.runtime.families.voxtral_tts.flow import frame_noise
from ttscore.runtime.families.voxtral_tts.request import VoxtralRequest

pytestmark = [pytest.mark.export, pytest.mark.parity]

CASES = [VoxtralRequest(text="Good evening, everyone!", voice="casual_male", max_new_tokens=16, seed=11),
         VoxtralRequest(text="Ça va?", voice="NEUTRAL_FEMALE", max_new_tokens=10, seed=12, cfg_alpha=1.6)]
TOL = 1e-4


@pytest.fixture(scope="module")
def model(voxtral_artifacts: Path) -> Any:
    from ttscore.runtime.families import load_model

    return load_model(voxtral_artifacts)


def _frames(model: Any, seqs: list[Any]) -> list[np.ndarray]:
    model.prefill([(s, s.prompt_tokens) for s in seqs])
    while any(s.finished is None for s in seqs):
        model.step([s for s in seqs if s.finished is None])
    return [np.array(s.pending, np.int64).reshape(len(s.pending), -1) for s in seqs]


def test_engine_matches_reference(voxtral_tiny: Path, model: Any) -> None:
    from ttscore.runtime.engine import Generator

    n_ac = model.num_codebooks - 1
    reqs = [{"text": r.text, "voice": (r.voice or "").lower(), "max_new_tokens": r.max_new_tokens,
             "cfg_alpha": r.cfg_alpha or 1.2} for r in CASES]
    noise = {f"noise_{i}": frame_noise(r.seed or 0, r.max_new_tokens or 0, n_ac) for i, r in enumerate(CASES)}
    ref = reference(voxtral_tiny, reqs, noise)
    for i, req in enumerate(CASES):
        seq = model.admit(req)
        np.testing.assert_array_equal(seq.ids, ref[f"prompt_ids_{i}"])
        req.initial_chunk_frames, req.chunk_frames = 1, 3
        events = list(Generator(model, max_batch=2, chunk_policy="fixed").synthesize(req))
        pcm = np.concatenate([ev.pcm for ev in events])
        want = ref[f"codes_{i}"]
        assert len(want) >= 3
        alone = _frames(model, [model.admit(req)])[0]
        np.testing.assert_array_equal(alone[:, 0], want[:, 0])
        np.testing.assert_array_equal(alone, want)
        assert len(events) >= 2 and pcm.shape == ref[f"audio_{i}"].shape
        np.testing.assert_allclose(pcm, ref[f"audio_{i}"], atol=TOL, rtol=0)


def test_frames_do_not_depend_on_the_batch(model: Any) -> None:
    alone = _frames(model, [model.admit(CASES[0])])[0]
    together = _frames(model, [model.admit(CASES[1]), model.admit(CASES[0])])[1]
    np.testing.assert_array_equal(alone, together)
    again = _frames(model, [model.admit(VoxtralRequest(text=CASES[0].text, voice="casual_male", max_new_tokens=16,
                                                       seed=99))])[0]
    assert not np.array_equal(alone[:, 1:], again[:, 1:])  # the seed reaches the noise


@pytest.mark.parametrize(("kw", "field"), [
    ({"voice": None}, "voice"), ({"voice": "alice"}, "voice"), ({"text": " "}, "input"),
    ({"max_new_tokens": 0}, "max_new_tokens"), ({"max_new_tokens": 4097}, "max_new_tokens"),
    ({"seed": -1}, "seed"), ({"cfg_alpha": -1.0}, "cfg_alpha")])
def test_admit_refuses(model: Any, kw: dict[str, Any], field: str) -> None:
    args: dict[str, Any] = {"text": "Hi", "voice": "casual_male", **kw}
    with pytest.raises(InvalidRequest) as e:
        model.admit(VoxtralRequest(**args))
    assert e.value.param == field


def test_say(voxtral_artifacts: Path, tmp_path: Path) -> None:
    import soundfile as sf

    from triton_tts.cli import main

    outs = []
    for name in ("a", "b"):
        path = tmp_path / f"{name}.wav"
        assert main(["say", "--artifacts", str(voxtral_artifacts), "-o", str(path), "--voice", "neutral_female",
                     "--seed", "3", "--max-new-tokens", "6", "Hello"]) == 0
        audio, sr = sf.read(str(path), dtype="float32")
        assert sr == 24000 and audio.shape[0] % 1920 == 0 and audio.shape[0] > 0
        outs.append(audio)
    np.testing.assert_array_equal(outs[0], outs[1])
    assert main(["say", "--artifacts", str(voxtral_artifacts), "-o", str(tmp_path / "c.wav"), "--voice", "alice",
                 "Hello"]) == 2
    assert main(["say", "--artifacts", str(voxtral_artifacts), "-o", str(tmp_path / "c.wav"), "--voice",
                 "casual_male", "--ref-audio", "x.wav", "Hello"]) == 2
