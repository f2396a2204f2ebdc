"""`triton-tts precompute-voice` for MOSS-TTS-Nano: the voice file holds the reference clip's codes [frames, 16]
(those of the export's moss_codec_encoder after resampling to 48 kHz: what `say --ref-audio` and the served
encoder compute), no transcript, with the codec's checksum (the manifest's codec.sha256, the codec folder's);
the gateway loads it next to the other families' voices for the checkpoints with that codec; another mode,
another family's export or a clip outside the bounds is refused naming the argument."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from moss_tts_nano_fixtures import *  # noqa: F403  (moss_tiny, moss_artifacts: the store's tiny checkpoint, its export)
from precompute_cli import codec_voices, precompute_command
from voices_audio import tone_file

from ttscore.contract.errors import InvalidRequest
from ttscore.contract.manifest import read_manifest
from ttscore.contract.moss_tts_nano import rules as spec
from ttscore.contract.moss_tts_nano.voicefile import manifest_codec_sha256

pytestmark = pytest.mark.export


def test_cli_writes_the_codes(tmp_path: Path, moss_artifacts: Path, moss_tiny: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    from ttscore.runtime import sinc_resample
    from ttscore.runtime.families import load_model
    from ttscore.runtime.families.moss_tts_nano.checkpoint import codec_dir, codec_sha256
    from ttscore.runtime.families.moss_tts_nano.model import MossModel

    ref = tone_file(tmp_path / "ref.wav", 1.1, 16000)
    out = tmp_path / "voices"
    run = precompute_command(moss_artifacts, ref, out)
    assert run("--voice-name", "Calm", "--ref-text", "ignored", "--speaker-description", "calm") == 0
    assert "MOSS-TTS-Nano clone, codes [" in capsys.readouterr().out
    sha = manifest_codec_sha256(dict(read_manifest(moss_artifacts).raw))
    assert sha == codec_sha256(codec_dir(moss_tiny))
    voice = codec_voices(out, spec.FAMILY, ("nano", sha), ("other", "0" * 64))["calm"]
    assert (voice.name, voice.mode, voice.ref_text, voice.model_type, voice.models) == (
        "Calm", "clone", None, spec.FAMILY, ("nano",))
    wav, sr = sf.read(ref, dtype="float32")
    model = load_model(moss_artifacts, encoders=True)
    assert isinstance(model, MossModel)
    want = model.encode(sinc_resample.resample(wav, sr, 48000))  # say's path: resampled, then encoded
    assert want.shape == (int(1.1 * 12.5), 16)
    np.testing.assert_array_equal(voice.ref_codes, want)  # type: ignore[attr-defined]
    # another codec only: not served
    assert codec_voices(out, spec.FAMILY, ("nano", "0" * 64)) == {}
    with pytest.raises(InvalidRequest) as e:
        run("--voice-name", "x", "--mode", "xvec")
    assert e.value.param == "mode"


def test_a_reference_outside_the_bounds_names_ref_audio(tmp_path: Path, moss_artifacts: Path) -> None:
    from ttscore.runtime.families.moss_tts_nano.offline import precompute_voice

    ref = tone_file(tmp_path / "short.wav", 0.05, 16000)
    with pytest.raises(InvalidRequest) as e:
        precompute_voice(moss_artifacts, "short", ref, tmp_path / "v")
    assert e.value.param == "ref_audio"
    assert not (tmp_path / "v").exists()


def test_another_familys_export_names_checkpoint(tmp_path: Path, moss_artifacts: Path) -> None:
    from ttscore.runtime.families.moss_tts_nano.offline import precompute_voice

    other = tmp_path / "other"
    other.mkdir()
    raw = (moss_artifacts / "manifest.json").read_text()
    (other / "manifest.json").write_text(raw.replace('"family": "moss_tts_nano"', '"family": "breeze_tts_2"'))
    assert '"breeze_tts_2"' in (other / "manifest.json").read_text()
    with pytest.raises(InvalidRequest) as e:
        precompute_voice(other, "x", tone_file(tmp_path / "r.wav", 1.0, 16000), tmp_path / "v")
    assert e.value.param == "checkpoint"
