"""`triton-tts precompute-voice` for Breeze-TTS-2: the voice file holds the reference clip's codes
(those of the export's speech encoder at 24 kHz: what `say --ref-audio` and breeze_speech_encoder
compute) and its transcript, with the codec's checksum; the gateway loads it next to the other
families' voices; a voice without a transcript, another mode or another family's export is refused
naming the argument."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf
from precompute_cli import codec_voices, precompute_command
from voices_audio import tone_file

from ttscore.contract import breeze_tts_2 as spec
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.manifest import read_manifest

pytestmark = pytest.mark.export

REF_TEXT = "The reference transcript."


def test_cli_writes_the_codes_and_transcript(tmp_path, breeze_export, capsys):
    from ttscore.runtime.families import load_model

    ref = tone_file(tmp_path / "ref.wav", 1.1, 16000)
    out = tmp_path / "voices"
    run = precompute_command(breeze_export, ref, out)
    assert run("--voice-name", "Calm", "--ref-text", f" {REF_TEXT} ") == 0
    assert "Breeze-TTS-2 clone" in capsys.readouterr().out
    sha = read_manifest(breeze_export).source_sha256("audio_tokenizer/model.safetensors")
    assert sha
    voices = codec_voices(out, spec.FAMILY, ("breeze", sha))
    voice = voices["calm"]
    assert (voice.name, voice.mode, voice.ref_text, voice.model_type, voice.models) == (
        "Calm", "clone", REF_TEXT, spec.FAMILY, ("breeze",))
    wav, sr = sf.read(ref, dtype="float32")
    want = load_model(breeze_export).encode_reference(wav, sr)
    np.testing.assert_array_equal(voice.ref_codes, want)  # type: ignore[attr-defined]
    assert want.shape[1] == 16 and want.shape[0] > 0
    # another codec: not served
    assert codec_voices(out, spec.FAMILY, ("breeze", "0" * 64)) == {}
    for extra, param in ((["--voice-name", "x"], "ref_text"),
                         (["--voice-name", "x", "--ref-text", "t", "--mode", "xvec"], "mode")):
        with pytest.raises(InvalidRequest) as e:
            run(*extra)
        assert e.value.param == param


def test_a_reference_outside_the_bounds_names_ref_audio(tmp_path, breeze_export):
    from ttscore.runtime.families.breeze_tts_2.offline import precompute_voice

    ref = tone_file(tmp_path / "short.wav", 0.05, 16000)
    with pytest.raises(InvalidRequest) as e:
        precompute_voice(breeze_export, "short", ref, REF_TEXT, tmp_path / "v")
    assert e.value.param == "ref_audio"
