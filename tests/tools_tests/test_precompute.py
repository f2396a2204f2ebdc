"""`triton-tts precompute-voice` / triton_tts.precompute: the custom_voice_dir format it writes."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest
from voices_audio import encode_sf, tone

from gateway.voice_registry import precomputed_loaders
from gateway.voices.precomputed import load_precomputed_voices
from triton_tts import precompute
from triton_tts.precompute import add_precompute_parser
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.voicefile import MANIFEST_NAME, write_voice_profile
from ttscore.runtime.families.qwen3_tts.offline import precompute_voice


@pytest.mark.unit
def test_written_format(tmp_path):
    xvec = np.linspace(-1, 1, 8).astype(np.float32)
    codes = np.arange(5 * 16).reshape(5, 16).astype(np.int64)
    entry = write_voice_profile(tmp_path, "Alice", xvec, codes, mode="icl", ref_text=" Hi there. ",
                                speaker_description="warm narrator")
    manifest = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert manifest["schema_version"] == 1 and manifest["model_type"] == "qwen3_tts"
    assert manifest["voices"] == {"Alice": entry}
    assert entry == {
        "name": "Alice", "file": "alice.safetensors", "mode": "icl", "embedding_dim": 8, "ref_code_length": 5,
        "ref_text": "Hi there.", "speaker_description": "warm narrator", "created_at": entry["created_at"],
    }
    from safetensors.numpy import load_file

    tensors = load_file(str(tmp_path / "alice.safetensors"))
    assert set(tensors) == {"speaker_embedding", "ref_code"}
    assert tensors["speaker_embedding"].dtype == np.float32 and tensors["ref_code"].dtype == np.int32
    np.testing.assert_array_equal(tensors["speaker_embedding"], xvec)
    np.testing.assert_array_equal(tensors["ref_code"], codes)
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == [
        "alice.safetensors", MANIFEST_NAME,
    ]
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".tmp-*"))


@pytest.mark.unit
def test_manifest_merges_and_replaces_case_insensitively(tmp_path):
    write_voice_profile(tmp_path, "alice", np.ones(4), None, mode="xvec")
    write_voice_profile(tmp_path, "bob", np.ones(4), None, mode="xvec", speaker_description="deep")
    write_voice_profile(tmp_path, "ALICE", np.full(4, 2.0), None, mode="xvec")
    voices = json.loads((tmp_path / MANIFEST_NAME).read_text())["voices"]
    assert sorted(voices) == ["ALICE", "bob"]
    loaded = load_precomputed_voices(tmp_path, precomputed_loaders())
    np.testing.assert_array_equal(loaded["alice"].features.x_vector, np.full(4, 2.0, np.float32))


@pytest.mark.unit
@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"voice_name": "../x"}, "voice_name"),
        ({"voice_name": "a\x01b"}, "voice_name"),
        ({"mode": "bogus"}, "mode"),
        ({"mode": "icl", "ref_text": None}, "ref_text"),
        ({"mode": "icl", "ref_text": "t", "ref_codes": None}, "ref_audio"),
        ({"x_vector": np.array([np.nan, 1.0])}, "ref_audio"),
    ],
)
def test_write_rejects_bad_input(tmp_path, kwargs, param):
    args = {"voice_name": "ok", "x_vector": np.ones(4), "ref_codes": None, "mode": "xvec", "ref_text": None, **kwargs}
    with pytest.raises(InvalidRequest) as e:
        write_voice_profile(tmp_path, args.pop("voice_name"), args.pop("x_vector"), args.pop("ref_codes"), **args)
    assert e.value.param == param
    assert not (tmp_path / MANIFEST_NAME).exists()


@pytest.mark.unit
def test_foreign_manifest_is_not_clobbered(tmp_path):
    from ttscore.contract import families
    from ttscore.contract.voicefile import check_voices_dir

    (tmp_path / MANIFEST_NAME).write_text(json.dumps({"schema_version": 1, "model_type": "mars_tts", "voices": {}}))
    with pytest.raises(InvalidRequest, match="mars_tts") as e:  # what precompute-voice checks first
        check_voices_dir(tmp_path, tuple(families.RULES))
    assert e.value.param == "output_dir"
    check_voices_dir(tmp_path, ("mars_tts",))  # a family the deployment knows (a plugin's) is fine
    (tmp_path / MANIFEST_NAME).write_text("{broken")
    with pytest.raises(InvalidRequest, match="unreadable"):
        write_voice_profile(tmp_path, "a", np.ones(4), None, mode="xvec")


@pytest.mark.unit
def test_parser_registers_the_issue_arguments():
    parser = argparse.ArgumentParser(prog="triton-tts")
    sub = parser.add_subparsers(dest="cmd", required=True)
    add_precompute_parser(sub)
    args = parser.parse_args(["precompute-voice", "--checkpoint", "ckpt", "--voice-name", "alice", "--ref-audio",
                              "a.wav", "--ref-text", "hello", "--mode", "icl", "--output-dir", "out"])
    assert (args.checkpoint, args.voice_name, args.ref_audio, args.ref_text, args.mode, args.output_dir) == (
        "ckpt", "alice", "a.wav", "hello", "icl", "out")
    assert args.func is precompute._cmd_precompute_voice
    assert parser.parse_args(["precompute-voice", "--checkpoint", "c", "--voice-name", "v", "--ref-audio", "a",
                              "--output-dir", "o"]).mode is None  # xvec (Qwen3-TTS) or by --prompt-text (VoxCPM2)
    with pytest.raises(SystemExit):
        parser.parse_args(["precompute-voice", "--checkpoint", "c", "--voice-name", "v", "--ref-audio", "a",
                           "--output-dir", "o", "--mode", "full"])


@pytest.mark.export  # tiny_base exports a tiny Base checkpoint once per session
def test_precompute_with_the_tiny_base_pipeline_round_trips(tmp_path, tiny_base):
    _, _, pipeline = tiny_base
    ref = tmp_path / "ref.wav"
    audio = tone(1.3, 16000)
    ref.write_bytes(encode_sf(audio, 16000, "WAV", "FLOAT"))
    out = tmp_path / "voices"
    precompute_voice(pipeline, "Alice", ref, ref_text="reference transcript", mode="icl", output_dir=out,
                     speaker_description="tiny")
    precompute_voice(pipeline, "bob", ref, mode="xvec", output_dir=out)
    x_ref, codes_ref = pipeline.voice_features(audio, 16000, with_codes=True)
    voices = load_precomputed_voices(out, precomputed_loaders(
        {"qwen3_tts": {"embedding_dim": x_ref.shape[0], "num_code_groups": codes_ref.shape[1]}}))
    assert sorted(voices) == ["alice", "bob"]
    alice = voices["alice"]
    assert (alice.name, alice.mode, alice.ref_text, alice.speaker_description) == (
        "Alice", "icl", "reference transcript", "tiny")
    np.testing.assert_allclose(alice.features.x_vector, x_ref, atol=1e-6)
    np.testing.assert_array_equal(alice.features.ref_codes, codes_ref)
    assert voices["bob"].features.ref_codes is None and voices["bob"].x_vector_only


@pytest.mark.export
def test_cli_command(tmp_path, tiny_base, monkeypatch, capsys):
    from triton_tts import artifacts as artifact_cache

    ckpt, artifacts, pipeline = tiny_base
    exported = []

    def fake_ensure(path, *a, **k):  # the session fixture already exported this checkpoint
        exported.append(path)
        return artifacts

    monkeypatch.setattr(artifact_cache, "ensure_artifacts", fake_ensure)
    ref = tmp_path / "ref.flac"
    ref.write_bytes(encode_sf(tone(1.2, 24000), 24000, "FLAC"))
    parser = argparse.ArgumentParser(prog="triton-tts")
    add_precompute_parser(parser.add_subparsers(dest="cmd", required=True))
    args = parser.parse_args(["precompute-voice", "--checkpoint", str(ckpt), "--voice-name", "carol",
                              "--ref-audio", str(ref), "--mode", "xvec", "--output-dir", str(tmp_path / "o")])
    assert args.func(args) == 0
    assert [str(p) for p in exported] == [str(ckpt)] and "carol.safetensors" in capsys.readouterr().out  # the spec as given (a path or a repo id)
    assert list(load_precomputed_voices(tmp_path / "o", precomputed_loaders())) == ["carol"]
    args = parser.parse_args(["precompute-voice", "--checkpoint", str(ckpt), "--voice-name", "dave",
                              "--ref-audio", str(ref), "--mode", "icl", "--output-dir", str(tmp_path / "o")])
    with pytest.raises(InvalidRequest, match="--ref-text"):
        args.func(args)
    args = parser.parse_args(["precompute-voice", "--checkpoint", str(ckpt), "--voice-name", "erin",
                              "--ref-audio", str(tmp_path / "missing.wav"), "--output-dir", str(tmp_path / "o")])
    with pytest.raises(InvalidRequest, match="cannot read reference audio"):
        args.func(args)
