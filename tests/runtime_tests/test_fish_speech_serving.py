"""Fish Speech S2 Pro served: the deploy plan (inline vocoder, one dac_encoder per checkpoint), the demo entry, the
speech_generation tensors decoded into the runtime's request (text, max_new_tokens, seed, temperature, top_k,
top_p, ref_dac_codes -> ref_codes, ref_text; a foreign input refused naming it), the dac_encoder's glue giving
the offline encoder's codes, and the served model (encoders off) taking codes, never a clip."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from deploy_plans import assert_inline_with_an_encoder_each
from fish_speech_fixtures import *  # noqa: F403  (fish_tiny, fish_artifacts)

from ttscore.contract import fish_speech as spec
from ttscore.contract import tensors as triton_io
from ttscore.contract.errors import InvalidRequest

pytestmark = pytest.mark.export


def _clip(seconds: float = 0.5, rate: int = spec.SAMPLE_RATE, seed: int = 0) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    noise = np.random.default_rng(seed).normal(0, 0.01, t.size)
    return (0.3 * np.sin(2 * np.pi * 220 * t) + noise).astype(np.float32)


def test_served_with_an_inline_vocoder_a_dac_encoder_and_a_tiny_demo(fish_artifacts: Path) -> None:
    from export.families import FAMILIES

    assert [name for name, _ in FAMILIES[spec.FAMILY].demo] == ["Fish-Speech-S2-Pro-tiny"]
    assert_inline_with_an_encoder_each(spec.FAMILY, fish_artifacts, "dac_encoder")


def test_request_from_tensors() -> None:
    from ttscore.runtime.families import FAMILIES
    from ttscore.runtime.families.fish_speech.request import FishRequest

    family = FAMILIES[spec.FAMILY]
    codes = np.arange(30, dtype=np.int64).reshape(3, 10)
    sent = triton_io.request_tensors(text="Hi.", max_new_tokens=12, seed=3, temperature=0.5, top_k=7, top_p=0.8,
                                     ref_text="Ref.", ref_dac_codes=codes)
    got = family.request_from_tensors(sent)
    assert isinstance(got, FishRequest) and got.ref_codes is not None
    assert np.array_equal(got.ref_codes, codes) and got.ref_audio is None
    assert (got.text, got.max_new_tokens, got.seed, got.temperature, got.top_k, got.top_p, got.ref_text) == (
        "Hi.", 12, 3, 0.5, 7, pytest.approx(0.8), "Ref.")
    assert family.request_from_tensors(triton_io.request_tensors(text="Hi.")) == FishRequest(text="Hi.")
    for foreign in ({"speaker": "x"}, {"cfg_alpha": 1.0}, {"ref_audio_codes": np.zeros((8, 2), np.int64)}):
        with pytest.raises(InvalidRequest) as info:
            family.request_from_tensors(triton_io.request_tensors(text="Hi.", **foreign))
        assert info.value.param == next(iter(foreign))


def test_dac_encoder_glue_gives_the_offline_codes(fish_artifacts: Path) -> None:
    """The Triton model's glue (settings from its config, the manifest's dac_encode) makes the codes the offline
    runner makes of the same 44.1 kHz clip; other rates are resampled; a clip out of bounds names ref_audio."""
    from ttscore.backend.fish_speech import encoder
    from ttscore.backend.settings import OrtModelSettings
    from ttscore.runtime.families.fish_speech.artifacts import FishArtifacts

    settings = OrtModelSettings.from_model_config(
        {"name": "dac_encoder", "parameters": {"artifacts_dir": {"string_value": str(fish_artifacts)}}})
    enc = encoder.load("dac_encoder", settings)
    clip = _clip()
    out = encoder.encode_request({"audio": clip, "sample_rate": np.array([spec.SAMPLE_RATE], np.int32)}, enc)
    codes = out["ref_dac_codes"]
    assert codes.dtype == np.int64 and codes.shape == (-(-clip.size // 2048), 10)
    assert np.array_equal(codes, FishArtifacts(fish_artifacts).encode(clip))
    low = encoder.encode_request({"audio": _clip(rate=16000), "sample_rate": np.array([16000], np.int32)}, enc)
    assert low["ref_dac_codes"].shape[1] == 10
    with pytest.raises(InvalidRequest) as info:
        encoder.encode_request({"audio": clip[:100], "sample_rate": np.array([spec.SAMPLE_RATE], np.int32)}, enc)
    assert info.value.param == "ref_audio"


def test_served_model_takes_codes_not_a_clip(fish_artifacts: Path) -> None:
    """load_model(encoders=False) (speech_generation) refuses reference audio; given the dac_encoder's codes it
    makes what the offline model makes of the clip itself; ref_text is required with them."""
    from ttscore.runtime.engine import Generator
    from ttscore.runtime.families import load_model
    from ttscore.runtime.families.fish_speech.request import FishRequest

    served = load_model(fish_artifacts, encoders=False)
    offline = load_model(fish_artifacts)
    clip = _clip()
    with pytest.raises(InvalidRequest) as info:
        served.admit(FishRequest(text="Hi there.", ref_audio=clip, ref_text="A clip."))
    assert info.value.param == "ref_audio"
    with pytest.raises(InvalidRequest) as info:
        served.admit(FishRequest(text="Hi there.", ref_codes=np.zeros((2, 10), np.int64)))
    assert info.value.param == "ref_text"
    codes = offline.a.encode(clip)  # type: ignore[attr-defined]

    def run(model: object, req: FishRequest) -> np.ndarray:
        gen = Generator(model)  # type: ignore[arg-type]
        gen.submit("r", req)
        pcm = []
        while gen.num_active:
            pcm += [ev.pcm for ev in gen.step()]
        return np.concatenate(pcm)

    a = run(served, FishRequest(text="Hi there.", ref_codes=codes, ref_text="A clip.", seed=5, max_new_tokens=6))
    b = run(offline, FishRequest(text="Hi there.", ref_audio=clip, ref_text="A clip.", seed=5, max_new_tokens=6))
    assert a.size > 0 and np.array_equal(a, b)


def test_offline_say(fish_artifacts: Path, tmp_path: Path) -> None:
    """`say`: text-only (voice omitted or default), cloned from a clip file at another rate (resampled, encoded
    in process), --greedy as temperature 0; another voice or --language refused naming it."""
    import soundfile as sf

    from ttscore.runtime.families import FAMILIES
    from ttscore.runtime.family import SayOptions

    offline = FAMILIES[spec.FAMILY].offline
    job = offline.say(fish_artifacts, SayOptions(text="Hi.", voice="default", seed=3, greedy=True))
    assert job.sample_rate == spec.SAMPLE_RATE and job.request.temperature == 0.0 and job.request.ref_audio is None
    clip = tmp_path / "ref.wav"
    sf.write(clip, _clip(rate=22050), 22050, subtype="FLOAT")
    job = offline.say(fish_artifacts, SayOptions(text="Hi.", ref_audio=str(clip), ref_text="A clip."))
    assert job.request.ref_audio.size == int(0.5 * spec.SAMPLE_RATE)
    assert job.model.admit(job.request).audio_tokens > 0
    for options, param in ((SayOptions(text="Hi.", voice="vivian"), "voice"),
                           (SayOptions(text="Hi.", language="English"), "language")):
        with pytest.raises(InvalidRequest) as info:
            offline.say(fish_artifacts, options)
        assert info.value.param == param
