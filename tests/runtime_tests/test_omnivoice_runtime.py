"""OmniVoice's runtime: the unmasking schedule against the reference's, the request rules (400s
naming the field), and `say` on the tiny checkpoint."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from deploy_plans import deploy
from omnivoice_fixtures import *  # noqa: F403  (its session fixtures: omnivoice_tiny, omnivoice_artifacts)

from ttscore.contract.errors import InvalidRequest
from ttscore.runtime.families.omnivoice.request import OmniVoiceRequest
from ttscore.runtime.families.omnivoice.unmask import schedule, time_steps


@pytest.mark.parity
@pytest.mark.parametrize("num_step, t_shift", [(32, 0.1), (8, 0.1), (16, 1.0), (1, 0.1), (7, 0.37), (64, 0.05)])
def test_time_steps_and_schedule_are_the_reference_s(num_step: int, t_shift: float) -> None:
    from export.omnivoice.reference import omnivoice_module

    ref = omnivoice_module()._get_time_steps(t_start=0.0, t_end=1.0, num_step=num_step, t_shift=t_shift)
    np.testing.assert_array_equal(time_steps(num_step, t_shift), ref.numpy())
    ts = ref.tolist()
    for total in (8, 200, 8 * 377):
        left, want = total, []
        for s in range(num_step):
            k = left if s == num_step - 1 else min(math.ceil(total * (ts[s + 1] - ts[s])), left)
            want.append(k)
            left -= k
        assert schedule(total, num_step, t_shift) == want


@pytest.fixture(scope="module")
def model(omnivoice_artifacts: Path) -> Any:
    from ttscore.runtime.families import load_model

    return load_model(omnivoice_artifacts)


@pytest.mark.parametrize("request_kw, field", [
    ({"text": " "}, "text"),
    ({"text": "hi", "instructions": "robot"}, "instructions"),
    ({"text": "hi", "language": "Klingon"}, "language"),
    ({"text": "hi", "num_step": 0}, "num_step"),
    ({"text": "hi", "guidance_scale": float("nan")}, "extra_params"),
    ({"text": "hi", "position_temperature": -1.0}, "extra_params"),
    ({"text": "hi", "speed": 9.0}, "speed"),
    ({"text": "a long text " * 10, "max_new_tokens": 5}, "max_new_tokens"),
    ({"text": "hi", "ref_codes": np.zeros((3, 4), np.int64)}, "ref_codes"),
])
def test_refusals_name_the_field(model: Any, request_kw: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        model.admit(OmniVoiceRequest(**request_kw))
    assert info.value.param == field


def test_language_auto_is_none_and_names_map_to_ids(model: Any) -> None:
    a = model.admit(OmniVoiceRequest(text="hi", language="Auto"))
    b = model.admit(OmniVoiceRequest(text="hi"))
    np.testing.assert_array_equal(a.cond_ids, b.cond_ids)
    en = model.admit(OmniVoiceRequest(text="hi", language="en"))
    np.testing.assert_array_equal(model.admit(OmniVoiceRequest(text="hi", language="English")).cond_ids, en.cond_ids)
    assert en.cond_ids.shape != a.cond_ids.shape or not np.array_equal(en.cond_ids, a.cond_ids)


def test_seeded_sampling_repeats_and_the_whole_utterance_is_one_chunk(model: Any) -> None:
    from ttscore.runtime.engine import Generator

    def run(seed: int) -> Any:
        events = list(Generator(model).synthesize(OmniVoiceRequest(text="hello world", seed=seed, num_step=4,
                                                                   class_temperature=1.0)))
        assert len(events) == 1 and events[0].final and events[0].usage.output_tokens == events[0].frames
        return events[0]

    a, b, c = run(1), run(1), run(2)
    np.testing.assert_array_equal(a.codes, b.codes)
    np.testing.assert_array_equal(a.pcm, b.pcm)
    assert not np.array_equal(a.codes, c.codes)
    assert a.pcm.shape == (a.frames * 960,) and np.isfinite(a.pcm).all()


def test_say_writes_a_wav(omnivoice_tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`say --checkpoint`: exported into the (test's own) cache, then synthesized."""
    import soundfile as sf

    from triton_tts.cli import main

    monkeypatch.setenv("TRITON_TTS_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out.wav"
    assert main(["say", "--checkpoint", str(omnivoice_tiny), "-o", str(out), "--instructions", "female",
                 "--seed", "1", "Hello there."]) in (0, None)
    audio, sr = sf.read(out)
    assert sr == 24000 and len(audio) > 0 and len(audio) % 960 == 0


def test_served_with_an_inline_codec_decoder_and_a_tiny_demo(omnivoice_artifacts: Path) -> None:
    """A demo checkpoint for `serve`/`prepare --demo`; a deployment renders each checkpoint's
    speech_generation (codec decoder inline) and its codec_encoder (voice features)."""
    from export.families import FAMILIES

    entry = FAMILIES["omnivoice"]
    assert [name for name, _ in entry.demo] == ["OmniVoice-tiny"]

    plan = deploy("omnivoice", omnivoice_artifacts, "omni")
    assert plan.vocoder == {"omni": "inline"} and plan.voice_features == {"omni": "codec_encoder"}
    assert plan.models == [("codec_encoder", "codec_encoder", {"artifacts_dir": str(omnivoice_artifacts)})]
    two = deploy("omnivoice", omnivoice_artifacts, "a", "b")
    assert two.voice_features == {"a": "codec_encoder_a", "b": "codec_encoder_b"}


def test_sentence_chunks_send_each_chunk_as_it_completes(model: Any) -> None:
    """A streamed request: one audio event per chunk, each made at that chunk's last step; the same
    text as a whole request is one generation (the reference's rule under 30 s)."""
    from ttscore.runtime.engine import Generator

    text = "The first sentence is short. A second one follows it. The third ends the request."
    knobs = {"num_step": 4, "position_temperature": 0.0, "class_temperature": 0.0}
    gen = Generator(model)
    gen.submit("s", OmniVoiceRequest(text=text, sentence_chunks=True, **knobs))
    steps, audible = 0, []
    while gen.num_active:
        audible += [steps for ev in gen.step() if ev.frames]
        steps += 1
    assert audible == [3, 7, 11]  # three sentences, four steps each
    whole = list(Generator(model).synthesize(OmniVoiceRequest(text=text, **knobs)))
    assert [ev.final for ev in whole if ev.frames] == [True]


# --- cloning from audio (clone.py): the reference's preprocessing, then the codec_encoder graph ------
def _speechy(seconds: float, rate: int, seed: int) -> np.ndarray:
    """Tones with a syllable-like envelope (stands in for speech)."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    env = 0.5 + 0.5 * np.sin(2 * np.pi * 3 * t) ** 2
    x = sum(np.sin(2 * np.pi * f * t) for f in rng.uniform(120, 3000, 3)) * env
    return (0.2 * x / np.abs(x).max()).astype(np.float32)


def test_preprocessing_trims_silence_normalizes_and_keeps_whole_frames() -> None:
    from ttscore.runtime.families.omnivoice.clone import preprocess

    rate = 44100
    gap = np.zeros(rate, np.float32)  # 1 s of silence inside, 0.5 s at each end
    clip = np.concatenate([gap[: rate // 2], _speechy(1.0, rate, 1), gap, _speechy(0.8, rate, 2), gap[: rate // 2]])
    quiet = clip * np.float32(0.05)  # RMS well under 0.1
    stereo = np.stack([quiet, quiet], axis=1)
    wav = preprocess(stereo, rate)
    assert wav.dtype == np.float32 and wav.ndim == 1 and wav.size % 960 == 0
    # inner silence cut to 2 x 200 ms, leading to 100 ms, trailing to 200 ms (+ < 1 frame dropped)
    speech = 1.8 * 24000
    assert speech + 0.4 * 24000 <= wav.size + 960 <= speech + (0.4 + 0.1 + 0.2 + 0.05) * 24000
    assert np.all(np.abs(wav * 32768 - np.round(wav * 32768)) == 0)  # 16-bit samples, as pydub leaves them
    loud = preprocess(clip * np.float32(4.0), rate)  # RMS over 0.1: not scaled
    assert abs(float(np.abs(loud).max()) - 0.8) < 0.01
    assert float(np.sqrt(np.mean(wav**2))) > 0.09  # the quiet clip was scaled up to RMS 0.1 (before trimming)


@pytest.mark.parametrize("audio, rate, match", [
    (np.zeros(24000, np.float32), 24000, "empty after silence removal"),
    (np.full(240, 0.3, np.float32) * np.sign(np.sin(np.arange(240))), 2400, "sample rate"),
    (np.array([0.1, np.nan] * 12000, np.float32), 24000, "finite"),
    (np.full(1200, 0.3, np.float32), 24000, "must last"),
])
def test_reference_audio_refusals_name_ref_audio(omnivoice_artifacts: Path, audio: np.ndarray, rate: int,
                                                 match: str) -> None:
    from ttscore.contract.manifest import read_manifest
    from ttscore.runtime.families.omnivoice.clone import ReferenceEncoder

    enc = ReferenceEncoder(omnivoice_artifacts, read_manifest(omnivoice_artifacts), None)
    with pytest.raises(InvalidRequest, match=match) as info:
        enc.codes(audio, rate)
    assert info.value.param == "ref_audio"


def test_reference_encoder_codes(omnivoice_artifacts: Path) -> None:
    import dataclasses

    from ttscore.contract.manifest import read_manifest
    from ttscore.runtime.families.omnivoice.clone import ReferenceEncoder, preprocess

    manifest = read_manifest(omnivoice_artifacts)
    enc = ReferenceEncoder(omnivoice_artifacts, manifest, None)
    assert enc.available
    clip = _speechy(1.3, 16000, 3)
    codes = enc.codes(clip, 16000)
    assert codes.dtype == np.int64 and codes.shape == (8, preprocess(clip, 16000).size // 960)
    assert codes.min() >= 0 and codes.max() < 1024 and len(np.unique(codes)) > 10
    np.testing.assert_array_equal(enc.codes(clip, 16000), codes)
    # an export without the encoder (a decoder-only audio tokenizer) loads; cloning from audio is refused
    bare = dataclasses.replace(manifest, graphs={k: v for k, v in manifest.graphs.items() if k != "codec_encoder"})
    none = ReferenceEncoder(omnivoice_artifacts, bare, None)
    assert not none.available
    with pytest.raises(InvalidRequest, match="needs the codec encoder") as info:
        none.codes(clip, 16000)
    assert info.value.param == "ref_audio"


def test_say_clones_from_a_reference_clip(omnivoice_tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import soundfile as sf

    from triton_tts.cli import main

    monkeypatch.setenv("TRITON_TTS_CACHE", str(tmp_path / "cache"))
    ref = tmp_path / "ref.wav"
    sf.write(ref, _speechy(1.5, 22050, 4), 22050)
    out = tmp_path / "out.wav"
    assert main(["say", "--checkpoint", str(omnivoice_tiny), "-o", str(out), "--ref-audio", str(ref),
                 "--ref-text", "nice to meet you", "--greedy", "Hello there."]) in (0, None)
    audio, sr = sf.read(out)
    assert sr == 24000 and len(audio) > 0 and len(audio) % 960 == 0
    assert main(["say", "--checkpoint", str(omnivoice_tiny), "-o", str(out), "--ref-text", "hi", "Hello."]) not in (0, None)


def test_the_wire_s_reference_codes_are_the_request_s_ref_codes() -> None:
    from ttscore.contract import tensors as triton_io
    from ttscore.runtime.families import FAMILIES

    codes = np.arange(24, dtype=np.int64).reshape(8, 3)
    tensors = triton_io.request_tensors(text="hi", ref_audio_codes=codes, ref_text="a clip.")
    request = FAMILIES["omnivoice"].request_from_tensors(tensors)
    assert isinstance(request, OmniVoiceRequest) and request.ref_text == "a clip."
    np.testing.assert_array_equal(request.ref_codes, codes)
