"""CosyVoice3 served: the deploy plan (the hop vocoder inline, one prompt_encoder per checkpoint), the demo
entry, the export's front-end models, prompt_encoder's glue (reference audio -> the three features the
runtime's front-end computes; a clip it cannot take refused naming `ref_audio`), `say`, and prepare finding
the released layout (cosyvoice3.yaml, an empty config.json)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from cosyvoice3_fixtures import *  # noqa: F403  (cosyvoice3_tiny, cosyvoice3_artifacts)
from deploy_plans import assert_inline_with_an_encoder_each

from ttscore.contract import cosyvoice3 as spec
from ttscore.contract.errors import InvalidRequest

pytestmark = pytest.mark.export


def _clip() -> tuple[np.ndarray, int]:
    t = np.arange(int(24000 * 1.2)) / 24000
    return (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 24000


def test_deploy_plan_and_demo(cosyvoice3_artifacts: Path) -> None:
    from export.families import FAMILIES

    assert [name for name, _ in FAMILIES[spec.FAMILY].demo] == ["CosyVoice3-tiny"]
    assert spec.ENCODER_MODEL == "prompt_encoder"
    assert_inline_with_an_encoder_each(spec.FAMILY, cosyvoice3_artifacts, "prompt_encoder")


def test_prompt_encoder_glue_equals_the_front_end(cosyvoice3_tiny: Path, cosyvoice3_artifacts: Path) -> None:
    from ttscore.backend.cosyvoice3 import encoder
    from ttscore.backend.settings import OrtModelSettings
    from ttscore.contract.manifest import read_manifest
    from ttscore.runtime.families.cosyvoice3.frontend import FrontEnd

    assert sorted(p.name for p in (cosyvoice3_artifacts / "frontend").iterdir()) == [
        "campplus.onnx", "speech_tokenizer_v3.onnx"]
    front = encoder.load("prompt_encoder", OrtModelSettings(cosyvoice3_artifacts, 1, read_manifest(cosyvoice3_artifacts)))
    audio, rate = _clip()
    out = encoder.encode_request({"audio": audio, "sample_rate": np.array([rate], np.int32)}, front)
    want = FrontEnd(cosyvoice3_tiny).features(audio, rate)  # the checkpoint's own files
    assert [out[t.name].dtype for t in spec.ENCODER_OUTPUTS] == [np.int64, np.float32, np.float32]
    np.testing.assert_array_equal(out["prompt_speech_tokens"], want.speech_tokens)
    np.testing.assert_array_equal(out["prompt_mel"], want.feat)
    np.testing.assert_array_equal(out["prompt_embedding"], want.embedding)
    assert out["prompt_mel"].shape == (2 * len(want.speech_tokens), 80) and len(want.speech_tokens) > 0
    for bad in ({"audio": audio[:8000], "sample_rate": np.array([8000], np.int32)},
                {"audio": audio[:100], "sample_rate": np.array([rate], np.int32)},
                {"audio": np.full(24000, np.nan, np.float32), "sample_rate": np.array([rate], np.int32)}):
        with pytest.raises(InvalidRequest) as info:
            encoder.encode_request(bad, front)
        assert info.value.param == "ref_audio"
    with pytest.raises(InvalidRequest) as info:
        encoder.encode_request({"audio": audio}, front)
    assert info.value.param == "sample_rate"


def test_say_clones_from_a_file(cosyvoice3_artifacts: Path, tmp_path: Path) -> None:
    import soundfile as sf

    from ttscore.runtime.families import FAMILIES
    from ttscore.runtime.family import SayOptions

    audio, rate = _clip()
    sf.write(tmp_path / "ref.wav", audio, rate, subtype="FLOAT")
    offline = FAMILIES[spec.FAMILY].offline
    job = offline.say(cosyvoice3_artifacts, SayOptions(text="hi", ref_audio=str(tmp_path / "ref.wav"),
                                                       ref_text="a tone", max_new_tokens=5, seed=1))
    assert job.sample_rate == 24000 and job.model.admit(job.request).max_len == 5
    for options, param in ((SayOptions(text="hi", ref_text="a tone"), "ref_audio"),
                           (SayOptions(text="hi", ref_audio=str(tmp_path / "ref.wav")), "ref_text"),
                           (SayOptions(text="hi", voice="vivian"), "voice")):
        with pytest.raises(InvalidRequest) as info:
            offline.say(cosyvoice3_artifacts, options)
        assert info.value.param == param


def test_prepare_finds_the_released_layout(cosyvoice3_tiny: Path) -> None:
    from triton_tts.prepare import find_checkpoints

    assert [c.path for c in find_checkpoints(cosyvoice3_tiny)] == [cosyvoice3_tiny]
