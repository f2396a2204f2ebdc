"""OmniVoice cloning from audio against the references:

- the codec_encoder graph's codes equal transformers 5.14's HiggsAudioV2TokenizerModel.encode (the ref5
  environment, tests/omnivoice_codec_ref5.py) on clips of several lengths;
- the preprocessing (clone.preprocess) equals what the reference's create_voice_clone_prompt hands its
  tokenizer (needs pydub, the reference's own dependency; torchaudio.functional.resample, which no
  torchaudio build for this torch provides, is our resample.py, checked against torchaudio 2.11's code
  once: export/omnivoice/README.md), and the transcript its add_punctuation;
- end to end: `say --ref-audio --ref-text --greedy` (both temperatures 0) gives the codes of the
  reference's `_generate_iterative` with a VoiceClonePrompt whose codes come from the 5.x class encoding
  the same preprocessed clip, and its audio matches the reference decoder's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from omnivoice_fixtures import *  # noqa: F403  (its session fixtures: omnivoice_tiny, omnivoice_artifacts)

from ttscore.contract import omnivoice as spec

pytestmark = [pytest.mark.export, pytest.mark.parity, pytest.mark.slow]

AUDIO_RTOL = 1e-4  # max |ours - reference| / max |reference| of the decoded audio


def speechy(seconds: float, rate: int, seed: int, channels: int = 1) -> np.ndarray:
    """Tones under a syllable-like envelope, with pauses (stands in for speech)."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    env = np.clip(np.sin(2 * np.pi * rng.uniform(1.5, 3.0) * t), 0, None) ** 0.5
    x = sum(np.sin(2 * np.pi * f * t + p) for f, p in zip(rng.uniform(120, 3000, 4), rng.uniform(0, 6, 4), strict=True))
    x = env * x + 0.01 * rng.standard_normal(t.shape)
    out = (rng.uniform(0.02, 0.5) * x / np.abs(x).max()).astype(np.float32)
    if channels > 1:
        out = np.stack([out * (1 - 0.3 * c) for c in range(channels)], axis=1)
    return out


def ref5_codes(tokenizer: Path, clips: list[np.ndarray]) -> list[np.ndarray]:
    import refenv

    out = refenv.run(refenv.env_for(spec.FAMILY), refenv.TESTS / "omnivoice_codec_ref5.py",
                     {f"audio_{i}": c for i, c in enumerate(clips)}, [str(tokenizer), "encode"])
    return [out[f"codes_{i}"] for i in range(len(clips))]


@pytest.fixture(scope="module")
def encoder(omnivoice_artifacts: Path) -> Any:
    from ttscore.contract.manifest import read_manifest
    from ttscore.runtime.families.omnivoice.clone import ReferenceEncoder

    return ReferenceEncoder(omnivoice_artifacts, read_manifest(omnivoice_artifacts), None)


def test_graph_codes_equal_the_transformers_5_tokenizer(omnivoice_tiny: Path, encoder: Any) -> None:
    rng = np.random.default_rng(0)
    clips = [speechy(n * spec.HOP / spec.SAMPLE_RATE, spec.SAMPLE_RATE, 20 + n) for n in (1, 9, 40, 130)]
    clips.append((0.3 * rng.standard_normal(17 * spec.HOP)).astype(np.float32))
    want = ref5_codes(omnivoice_tiny / "audio_tokenizer", clips)
    assert encoder.graph is not None
    for clip, w in zip(clips, want, strict=True):
        got = encoder.graph.run({"audio": clip})["codes"]
        assert w.shape == (spec.NUM_CODEBOOKS, clip.size // spec.HOP)
        np.testing.assert_array_equal(got, w)
    assert len(np.unique(want[3])) > 50  # not a degenerate encoding


@pytest.mark.parametrize("rate, channels, seconds, seed", [(24000, 1, 2.5, 1), (16000, 1, 3.0, 2), (44100, 2, 2.2, 3),
                                                           (22050, 1, 1.7, 4), (48000, 2, 4.0, 5)])
def test_preprocessing_is_the_reference_s(omnivoice_tiny: Path, monkeypatch: pytest.MonkeyPatch, rate: int,
                                          channels: int, seconds: float, seed: int) -> None:
    import importlib.machinery
    import sys

    if importlib.machinery.PathFinder.find_spec("pydub") is None:  # (a stand-in may be in sys.modules)
        import refenv

        refenv.missing("the reference's silence removal needs pydub (requirements-nodeps.txt), not installed here")

    import torch

    from export.omnivoice.reference import load_reference, omnivoice_module
    from ttscore.contract.omnivoice.text import clone_ref_text
    from ttscore.runtime.families.omnivoice.clone import preprocess
    from ttscore.runtime.sinc_resample import resample

    mod = omnivoice_module()
    torchaudio = sys.modules[mod.torchaudio.__name__]
    monkeypatch.setattr(torchaudio.functional, "resample",
                        lambda w, orig_freq, new_freq: torch.from_numpy(resample(w.numpy(), orig_freq, new_freq)),
                        raising=False)
    model = load_reference(omnivoice_tiny)
    seen: list[np.ndarray] = []

    def record(audio: Any) -> Any:
        seen.append(audio[0, 0].numpy().copy())
        return model.audio_tokenizer.__class__.encode(model.audio_tokenizer, audio)

    monkeypatch.setattr(model.audio_tokenizer, "encode", record)
    rng = np.random.default_rng(seed)
    # speech, a long pause, speech, quiet tail (silence removal has work to do)
    clip = np.concatenate([speechy(seconds / 2, rate, seed, channels), np.zeros((rate, channels)).squeeze(),
                           speechy(seconds / 2, rate, seed + 10, channels),
                           (1e-4 * rng.standard_normal((rate // 2, channels))).squeeze()]).astype(np.float32)
    wave = torch.from_numpy(clip.T.copy() if channels > 1 else clip)
    prompt = model.create_voice_clone_prompt((wave, rate), ref_text="nice to meet you")
    (want,) = seen
    got = preprocess(clip, rate)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    assert got.size < clip.shape[0] * spec.SAMPLE_RATE / rate - 0.5 * spec.SAMPLE_RATE  # silence was cut
    assert prompt.ref_text == clone_ref_text("nice to meet you")


def test_say_clones_as_the_reference_with_both_temperatures_zero(omnivoice_tiny: Path, omnivoice_artifacts: Path,
                                                                 encoder: Any, tmp_path: Path) -> None:
    import soundfile as sf
    import torch

    from export.omnivoice.reference import load_reference, omnivoice_module
    from ttscore.runtime.engine import Generator
    from ttscore.runtime.families.omnivoice.clone import preprocess
    from ttscore.runtime.families.omnivoice.offline import OFFLINE
    from ttscore.runtime.family import SayOptions

    rate, transcript, text = 22050, "nice to meet you", "The quick brown fox jumps over the lazy dog."
    clip = np.concatenate([speechy(1.2, rate, 7), np.zeros(rate // 2, np.float32), speechy(0.9, rate, 8)])
    ref_wav = tmp_path / "ref.wav"
    sf.write(ref_wav, clip, rate, subtype="FLOAT")
    job = OFFLINE.say(omnivoice_artifacts, SayOptions(text=text, ref_audio=str(ref_wav), ref_text=transcript,
                                                      greedy=True))
    assert job.request.position_temperature == 0.0 and job.request.class_temperature in (None, 0.0)
    (want_ref,) = ref5_codes(omnivoice_tiny / "audio_tokenizer", [preprocess(clip, rate)])
    np.testing.assert_array_equal(job.request.ref_codes, want_ref)  # our clip codes = the 5.x class's

    mod = omnivoice_module()
    reference = load_reference(omnivoice_tiny)
    prompt = mod.VoiceClonePrompt(ref_audio_tokens=torch.from_numpy(want_ref), ref_text=transcript + ".", ref_rms=0.1)
    task = reference._preprocess_all(text=[text], voice_clone_prompt=prompt)
    config = mod.OmniVoiceGenerationConfig(position_temperature=0.0, class_temperature=0.0)  # 32 steps, CFG 2
    with torch.no_grad():
        want = reference._generate_iterative(task, config)[0].numpy()
        want_audio = reference.audio_tokenizer.decode(torch.from_numpy(want)[None]).audio_values[0, 0].numpy()
    (event,) = list(Generator(job.model).synthesize(job.request))
    assert event.codes is not None
    assert len(np.unique(want)) > 20
    np.testing.assert_array_equal(event.codes.T, want)
    assert np.abs(event.pcm - want_audio).max() <= AUDIO_RTOL * np.abs(want_audio).max()
