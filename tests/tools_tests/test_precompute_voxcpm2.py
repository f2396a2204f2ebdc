"""`triton-tts precompute-voice` for VoxCPM2: one profile per prompt mode (reference, continuation,
ref_continuation) in the custom_voice_dir format, its patches those of the exported AudioVAE encoder
(what audiovae_encoder computes for an upload), the checkpoint identity checked at load, and the
ref_continuation prompt carried over speech_generation's ref_patches + prompt_patches + ref_text to the
same request the parity test checks against the reference (tests/export_tests/test_voxcpm2_parity.py)."""

from __future__ import annotations

import argparse
import json
import logging

import numpy as np
import pytest
from precompute_cli import precompute_command
from safetensors.numpy import load_file
from voices_audio import encode_sf, tone

from gateway.families.voxcpm2 import PatchTarget
from gateway.voice_registry import precomputed_loaders
from gateway.voices.precomputed import load_precomputed_voices
from triton_tts.precompute import add_precompute_parser
from ttscore.contract import tensors as triton_io
from ttscore.contract import voxcpm2
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.voicefile import MANIFEST_NAME, write_voice_profile
from ttscore.contract.voxcpm2.voicefile import write_voxcpm2_profile
from ttscore.runtime.families import FAMILIES
from ttscore.runtime.families.voxcpm2.offline import precompute_voice as precompute_voxcpm2_voice

PROMPT = "This is the prompt."
MODES = ("reference", "continuation", "ref_continuation")


def _targets(*targets: PatchTarget) -> dict:
    """The loader's checks for VoxCPM2 profiles: the served checkpoints they must fit."""
    return {"voxcpm2": {"targets": list(targets)}}


def patches(t: int = 3, p: int = 2, d: int = 4, value: float = 0.5) -> np.ndarray:
    return np.full((t, p, d), value, np.float32)


# --- format (no export) ----------------------------------------------------------------------------


@pytest.mark.unit
def test_one_directory_holds_both_families(tmp_path):
    write_voice_profile(tmp_path, "qwen", np.ones(4), None, mode="xvec")
    entry = write_voxcpm2_profile(tmp_path, "Vox", mode="ref_continuation", ref_patches=patches(3),
                                  prompt_patches=patches(4, value=-1), prompt_text=f" {PROMPT} ",
                                  checkpoint={"name": "VoxCPM2-x", "audiovae_sha256": "ab"})
    assert entry == {"name": "Vox", "file": "vox.safetensors", "model_type": "voxcpm2", "mode": "ref_continuation",
                     "patch_size": 2, "feat_dim": 4, "ref_patch_length": 3, "prompt_patch_length": 4,
                     "prompt_text": PROMPT, "checkpoint": {"name": "VoxCPM2-x", "audiovae_sha256": "ab"},
                     "created_at": entry["created_at"]}
    manifest = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert manifest["model_type"] == "qwen3_tts" and set(manifest["voices"]) == {"qwen", "Vox"}
    assert set(load_file(str(tmp_path / "vox.safetensors"))) == {"ref_patches", "prompt_patches"}
    loaded = load_precomputed_voices(tmp_path, precomputed_loaders({
        "qwen3_tts": {"embedding_dim": 4}, "voxcpm2": {"targets": [PatchTarget("VoxCPM2-x", (2, 4), "ab")]}}))
    assert {k: v.model_type for k, v in loaded.items()} == {"qwen": "qwen3_tts", "vox": "voxcpm2"}
    vox = loaded["vox"]
    assert (vox.mode, vox.ref_text, vox.models, vox.features) == ("ref_continuation", PROMPT, ("VoxCPM2-x",), None)
    np.testing.assert_array_equal(vox.prompt_patches, patches(4, value=-1))
    # a VoxCPM2-only directory says so at the top
    write_voxcpm2_profile(tmp_path / "v", "a", mode="reference", ref_patches=patches(), prompt_patches=None)
    assert json.loads((tmp_path / "v" / MANIFEST_NAME).read_text())["model_type"] == "voxcpm2"
    assert list(load_precomputed_voices(tmp_path / "v", precomputed_loaders())) == ["a"]


@pytest.mark.unit
@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"mode": "icl"}, "mode"),
        ({"mode": "continuation", "prompt_text": None}, "prompt_text"),
        ({"mode": "reference", "prompt_text": "t"}, "prompt_text"),
        ({"mode": "ref_continuation", "prompt_patches": None}, "ref_audio"),
        ({"mode": "reference", "ref_patches": np.ones((3, 4), np.float32)}, "ref_audio"),
        ({"mode": "reference", "ref_patches": np.full((1, 2, 4), np.nan, np.float32)}, "ref_audio"),
        ({"mode": "ref_continuation", "prompt_patches": patches(2, p=3)}, "ref_audio"),
    ],
)
def test_write_rejects_bad_input(tmp_path, kwargs, param):
    args = {"mode": "reference", "ref_patches": patches(), "prompt_patches": patches(), "prompt_text": PROMPT,
            **kwargs}
    if args["mode"] == "reference" and "prompt_text" not in kwargs:
        args["prompt_text"] = None
    with pytest.raises(InvalidRequest) as e:
        write_voxcpm2_profile(tmp_path, "v", **args)
    assert e.value.param == param
    assert not (tmp_path / MANIFEST_NAME).exists()


@pytest.mark.unit
def test_invalid_voxcpm2_profiles_are_skipped(tmp_path, caplog):
    d = tmp_path
    write_voxcpm2_profile(d, "good", mode="continuation", ref_patches=None, prompt_patches=patches(),
                          prompt_text=PROMPT, checkpoint={"audiovae_sha256": "ab"})
    (d / "corrupt.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not a header")
    (d / "norefs.safetensors").write_bytes((d / "good.safetensors").read_bytes())
    manifest = json.loads((d / MANIFEST_NAME).read_text())
    good = manifest["voices"]["good"]
    manifest["voices"].update({
        "corrupt": {**good, "name": "corrupt", "file": "corrupt.safetensors"},
        "norefs": {**good, "name": "norefs", "file": "norefs.safetensors", "mode": "ref_continuation"},
        "notext": {**good, "name": "notext", "file": "good.safetensors", "prompt_text": " "},
        "badshape": {**good, "name": "badshape", "file": "good.safetensors", "patch_size": 9},
        "badmode": {**good, "name": "badmode", "file": "good.safetensors", "mode": "icl"},
        "alien": {**good, "name": "alien", "model_type": "mars_tts"},
    })
    (d / MANIFEST_NAME).write_text(json.dumps(manifest))
    with caplog.at_level(logging.WARNING):
        assert list(load_precomputed_voices(d, precomputed_loaders())) == ["good"]
    for reason in ("cannot load corrupt", "needs tensor 'ref_patches'", "needs 'prompt_text'", "the entry says",
                   "invalid mode 'icl'", "mars_tts"):
        assert reason in caplog.text, reason
    # The checkpoint identity: another AudioVAE or patch shape than every served VoxCPM2 -> skipped.
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert load_precomputed_voices(d, precomputed_loaders(_targets(PatchTarget("A", (2, 4), "cd"), PatchTarget("B", (4, 4))))) == {}
    assert "made for another checkpoint" in caplog.text
    fits = load_precomputed_voices(d, precomputed_loaders(_targets(
        PatchTarget("A", (2, 4), "cd"), PatchTarget("C", (2, 4), "ab"), PatchTarget("D", (2, 4)))))
    assert fits["good"].models == ("C", "D")


@pytest.mark.unit
def test_speech_generation_tensors_of_each_prompt_mode():
    vox = FAMILIES["voxcpm2"].request_from_tensors
    ref, prompt = patches(2), patches(3, value=-1)
    both = vox(triton_io.request_tensors(text="hi", ref_patches=ref, prompt_patches=prompt, ref_text=PROMPT))
    np.testing.assert_array_equal(both.ref_patches, ref)
    np.testing.assert_array_equal(both.prompt_patches, prompt)
    assert both.prompt_text == PROMPT
    cont = vox(triton_io.request_tensors(text="hi", prompt_patches=prompt, ref_text=PROMPT))
    assert cont.ref_patches is None and cont.prompt_text == PROMPT
    with pytest.raises(InvalidRequest) as e:
        vox(triton_io.request_tensors(text="hi", ref_patches=ref, prompt_patches=prompt))
    assert e.value.param == "ref_text"
    with pytest.raises(InvalidRequest) as e:
        FAMILIES["qwen3_tts"].request_from_tensors(triton_io.request_tensors(text="hi", prompt_patches=prompt))
    assert e.value.param == "prompt_patches"


@pytest.mark.unit
def test_parser_takes_the_spec_flag_names():
    parser = argparse.ArgumentParser(prog="triton-tts")
    add_precompute_parser(parser.add_subparsers(dest="cmd", required=True))
    args = parser.parse_args(["precompute-voice", "--model", "/m/VoxCPM2", "--voice-name", "alice", "--ref-audio",
                              "r.wav", "--mode", "ref_continuation", "--prompt-text", "hi", "--output-dir", "o"])
    assert (args.checkpoint, args.mode, args.ref_text) == ("/m/VoxCPM2", "ref_continuation", "hi")


# --- with the tiny VoxCPM2 export -------------------------------------------------------------------


@pytest.fixture(scope="module")
def ref_wav(tmp_path_factory):
    path = tmp_path_factory.mktemp("vox-ref") / "ref.wav"
    path.write_bytes(encode_sf(tone(1.1, 16000), 16000, "WAV", "FLOAT"))
    return path


@pytest.fixture(scope="module")
def vox_model(voxcpm2_artifacts):
    from ttscore.runtime.families import load_model

    return load_model(voxcpm2_artifacts)


@pytest.mark.export
@pytest.mark.parametrize("mode", MODES)
def test_each_mode_writes_a_loadable_profile(tmp_path, voxcpm2_artifacts, vox_model, ref_wav, mode):
    from ttscore.contract.manifest import read_manifest
    from ttscore.runtime.audio import load_audio

    text = None if mode == "reference" else PROMPT
    entry = precompute_voxcpm2_voice(voxcpm2_artifacts, "Alice", ref_wav, prompt_text=text, mode=mode,
                                     output_dir=tmp_path, speaker_description="tiny")
    manifest = read_manifest(voxcpm2_artifacts)
    sha = manifest.source_sha256(voxcpm2.AUDIOVAE_FILE)
    shape = voxcpm2.patch_shape(dict(manifest.configs["config.json"]))
    assert sha and entry["checkpoint"] == {"name": "VoxCPM2-tiny", "audiovae_sha256": sha}
    assert (entry["mode"], entry["patch_size"], entry["feat_dim"]) == (mode, *shape)
    voices = load_precomputed_voices(tmp_path, precomputed_loaders(_targets(PatchTarget("VoxCPM2-tiny", shape, sha))))
    alice = voices["alice"]
    assert (alice.name, alice.mode, alice.ref_text, alice.speaker_description, alice.models) == (
        "Alice", mode, text, "tiny", ("VoxCPM2-tiny",))
    wav, sr = load_audio(ref_wav.read_bytes())
    for got, pad, wanted in ((alice.ref_patches, "right", mode != "continuation"),
                             (alice.prompt_patches, "left", mode != "reference")):
        if wanted:
            np.testing.assert_array_equal(got, vox_model.encode_reference(wav, sr, pad=pad))
        else:
            assert got is None
    assert load_precomputed_voices(tmp_path, precomputed_loaders(_targets(PatchTarget("other", shape, "0" * 64)))) == {}


@pytest.mark.export
def test_cli_and_bad_arguments(tmp_path, voxcpm2_artifacts, ref_wav, capsys):
    run = precompute_command(voxcpm2_artifacts, ref_wav, tmp_path)
    assert run("--voice-name", "dflt", "--prompt-text", PROMPT) == 0
    assert "VoxCPM2 ref_continuation" in capsys.readouterr().out
    assert run("--voice-name", "plain") == 0
    assert {k: v.mode for k, v in load_precomputed_voices(tmp_path, precomputed_loaders()).items()} == {
        "dflt": "ref_continuation", "plain": "reference"}
    for extra, param in ((["--mode", "xvec"], "mode"), (["--mode", "continuation"], "prompt_text")):
        with pytest.raises(InvalidRequest) as e:
            run("--voice-name", "bad", *extra)
        assert e.value.param == param


@pytest.mark.export
def test_ref_continuation_over_the_wire_is_the_parity_request(vox_model, ref_wav):
    """speech_generation's ref_patches + prompt_patches + ref_text give the request whose output
    tests/export_tests/test_voxcpm2_parity.py checks against the reference's ref_continuation prompt cache."""
    from ttscore.runtime.audio import load_audio
    from ttscore.runtime.engine import Generator
    from ttscore.runtime.families.voxcpm2.request import VoxCPM2Request

    wav, sr = load_audio(ref_wav.read_bytes())
    right, left = vox_model.encode_reference(wav, sr, pad="right"), vox_model.encode_reference(wav, sr, pad="left")
    direct = VoxCPM2Request("Hello there.", seed=11, max_new_tokens=6, ref_patches=right, prompt_patches=left,
                            prompt_text=PROMPT)
    wire = FAMILIES["voxcpm2"].request_from_tensors(triton_io.request_tensors(
        text="Hello there.", seed=11, max_new_tokens=6, ref_patches=right, prompt_patches=left, ref_text=PROMPT))

    def pcm(req):
        return np.concatenate([e.pcm for e in Generator(vox_model, max_batch=1, chunk_policy="fixed").synthesize(req)])

    np.testing.assert_array_equal(pcm(wire), pcm(direct))
