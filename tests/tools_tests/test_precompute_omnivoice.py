"""`triton-tts precompute-voice` for OmniVoice: the voice file holds the reference clip's codes [8, T]
(those of the export's codec_encoder after the reference's preprocessing: clone.ReferenceEncoder, what
`say --ref-audio` and a served `ref_audio` compute) and its optional transcript, with the codec's
checksum; the gateway's loader reads it back for served checkpoints of that codec and skips it for
another; another mode, a clip the encoder refuses, or another family's export are refused naming the
argument."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf
from omnivoice_fixtures import *  # noqa: F403  (its session fixtures: omnivoice_artifacts)
from precompute_cli import codec_voices, precompute_command
from voices_audio import tone_file

from ttscore.contract import omnivoice as spec
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.manifest import read_manifest
from ttscore.contract.voicefile import MANIFEST_NAME

pytestmark = pytest.mark.export

REF_TEXT = "The reference transcript"


def test_cli_writes_the_codes_and_transcript(tmp_path, omnivoice_artifacts, capsys):
    from ttscore.runtime.families.omnivoice.clone import ReferenceEncoder

    ref = tone_file(tmp_path / "ref.wav", 1.3, 22050)
    out = tmp_path / "voices"
    run = precompute_command(omnivoice_artifacts, ref, out)
    assert run("--voice-name", "Calm", "--ref-text", f" {REF_TEXT} ") == 0
    assert "OmniVoice clone, codes [8, " in capsys.readouterr().out
    assert run("--voice-name", "Plain", "--mode", "clone") == 0 and "no transcript" in capsys.readouterr().out
    manifest = read_manifest(omnivoice_artifacts)
    sha = manifest.source_sha256("audio_tokenizer/model.safetensors")
    assert sha
    entry = json.loads((out / MANIFEST_NAME).read_text())["voices"]["Calm"]
    assert entry["checkpoint"]["audio_tokenizer_sha256"] == sha and entry["model_type"] == spec.FAMILY
    voices = codec_voices(out, spec.FAMILY, ("omni", sha))
    wav, sr = sf.read(ref, dtype="float32")
    want = ReferenceEncoder(omnivoice_artifacts, manifest, None).codes(wav, sr)
    assert want.shape[0] == spec.NUM_CODEBOOKS and want.shape[1] > 0
    for key, name, text in (("calm", "Calm", REF_TEXT), ("plain", "Plain", None)):
        voice = voices[key]
        assert (voice.name, voice.mode, voice.ref_text, voice.model_type, voice.models) == (
            name, "clone", text, spec.FAMILY, ("omni",))
        np.testing.assert_array_equal(voice.ref_codes, want)  # type: ignore[attr-defined]
    # another codec: not served
    assert codec_voices(out, spec.FAMILY, ("omni", "0" * 64)) == {}
    with pytest.raises(InvalidRequest) as e:
        run("--voice-name", "x", "--mode", "xvec")
    assert e.value.param == "mode"


def test_a_refused_clip_names_ref_audio_and_another_family_names_checkpoint(tmp_path, omnivoice_artifacts,
                                                                           dummy_artifacts):
    from ttscore.runtime.families.omnivoice.offline import precompute_voice

    silent = tmp_path / "silent.wav"
    sf.write(silent, np.zeros(24000, np.float32), 24000, subtype="FLOAT")
    with pytest.raises(InvalidRequest) as e:
        precompute_voice(omnivoice_artifacts, "quiet", silent, REF_TEXT, tmp_path / "v")
    assert e.value.param == "ref_audio"
    ref = tone_file(tmp_path / "ref.wav", 1.2, 24000)
    with pytest.raises(InvalidRequest) as e:
        precompute_voice(dummy_artifacts, "other", ref, REF_TEXT, tmp_path / "v")
    assert e.value.param == "checkpoint"
