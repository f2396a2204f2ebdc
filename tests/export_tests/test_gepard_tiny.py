"""Gepard-1.0 tiny checkpoints: the released two-part layout (a bare qwen3_5_text config.json, the
gepard_config.json sidecar, real tensor names, a byte-level BPE tokenizer) plus the NanoCodec .nemo
archive in nanocodec/, loadable strictly by the reference classes in ref5 (Qwen3_5TextModel from the
checkpoint's own config via AutoConfig); the loaders refuse missing and unexpected tensors by name."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from checkpoint_layouts import copy_of
from gepard_fixtures import *  # noqa: F403  (gepard_tiny, reference)
from gepard_fixtures import reference

from ttscore.contract import gepard as spec
from ttscore.contract.errors import CheckpointError
from ttscore.runtime.families.gepard.checkpoint import is_gepard, parse_config, read_checkpoint, tensor_shapes

pytestmark = pytest.mark.export


def test_layout_and_configs(gepard_tiny: Path) -> None:
    files = sorted(str(p.relative_to(gepard_tiny)) for p in gepard_tiny.rglob("*") if p.is_file())
    assert files == ["config.json", "gepard_config.json", "model.safetensors",
                     "nanocodec/nemo-nano-codec-22khz-1.89kbps-21.5fps.nemo", "tokenizer.json",
                     "tokenizer_config.json"]
    cfg = json.loads((gepard_tiny / "config.json").read_text())
    assert cfg["model_type"] == "qwen3_5_text" and set(cfg["layer_types"]) == {"full_attention"}
    assert cfg["partial_rotary_factor"] == cfg["rope_parameters"]["partial_rotary_factor"] == 1.0
    side = json.loads((gepard_tiny / "gepard_config.json").read_text())
    assert list(side["audio_heads"]) == [f"level_audio_{i}" for i in range(32)]
    assert is_gepard(gepard_tiny)
    info = read_checkpoint(gepard_tiny)
    assert info.head_levels == spec.head_levels() and info.num_logits == 216
    assert info.temperature == 0.3 and info.sample_rate == 22050
    assert info.speaker_token_base + info.num_speaker_slots <= info.backbone.vocab_size


def test_real_size_config_is_the_released_shape() -> None:
    from export.gepard.tiny import model_config, sidecar_config

    info = parse_config(model_config("real"), sidecar_config("real"))
    assert (info.backbone.num_layers, info.backbone.hidden_size, info.backbone.num_heads) == (14, 1024, 8)
    assert (info.start_of_speech, info.start_of_text, info.speaker_token_base) == (248070, 248073, 248077)
    assert info.backbone.vocab_size == 248320


@pytest.mark.parametrize(("top", "rope", "ok"), [
    (1.0, 1.0, True), (None, 1.0, True), (0.25, 1.0, True),  # transformers reads rope_parameters' value
    (1.0, 0.25, False), (None, None, False),  # ... else the top-level one, else Qwen3.5's default 0.25
])
def test_the_rotary_fraction_must_be_one(top: float | None, rope: float | None, ok: bool) -> None:
    from export.gepard.tiny import model_config
    from ttscore.runtime.families.gepard.checkpoint import parse_backbone

    cfg = model_config("tiny")
    cfg.pop("partial_rotary_factor")
    cfg["rope_parameters"].pop("partial_rotary_factor")
    if top is not None:
        cfg["partial_rotary_factor"] = top
    if rope is not None:
        cfg["rope_parameters"]["partial_rotary_factor"] = rope
    if ok:
        parse_backbone(cfg)
    else:
        with pytest.raises(CheckpointError, match="partial_rotary_factor 0.25 is not supported"):
            parse_backbone(cfg)


def test_nemo_archive_is_a_tar_of_config_and_weights(gepard_tiny: Path) -> None:
    import tarfile

    with tarfile.open(gepard_tiny / "nanocodec/nemo-nano-codec-22khz-1.89kbps-21.5fps.nemo") as tar:
        assert sorted(m.name for m in tar.getmembers()) == ["./model_config.yaml", "./model_weights.ckpt"]
    from export.gepard.codec import load_codec

    codec = load_codec(gepard_tiny / "nanocodec/nemo-nano-codec-22khz-1.89kbps-21.5fps.nemo")
    assert codec.audio_decoder.hop == spec.SAMPLES_PER_FRAME and codec.sample_rate == spec.SAMPLE_RATE


def test_loader_refuses_missing_and_unexpected_tensors(gepard_tiny: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    bad = copy_of(gepard_tiny, tmp_path / "bad")
    weights = load_file(str(bad / "model.safetensors"))
    weights.pop("stop_head.bias")
    weights["codebook_heads.32.weight"] = weights["codebook_heads.0.weight"].clone()
    weights["ref_compressor.queries"] = weights["null_prefix"].clone()  # skipped by name, as vLLM-Omni's loader
    save_file(weights, str(bad / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"missing 1 tensor\(s\): stop_head.bias; "
                                              r"unexpected 1 tensor\(s\): codebook_heads.32.weight"):
        read_checkpoint(bad)


def test_loader_refuses_a_wrong_shape_and_a_missing_codec(gepard_tiny: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    bad = copy_of(gepard_tiny, tmp_path / "bad")
    weights = load_file(str(bad / "model.safetensors"))
    weights["null_prefix"] = weights["null_prefix"][:4].clone()
    save_file(weights, str(bad / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"null_prefix \[4, 64\] \(want \[8, 64\]\)"):
        read_checkpoint(bad)
    nocodec = copy_of(gepard_tiny, tmp_path / "nocodec")
    shutil.rmtree(nocodec / "nanocodec")
    with pytest.raises(CheckpointError, match="NanoCodec .nemo archive"):
        read_checkpoint(nocodec)


def test_codec_loader_refuses_missing_and_unexpected_decoder_tensors(gepard_tiny: Path, tmp_path: Path) -> None:
    from export.gepard.codec import load_codec, read_nemo, write_nemo

    archive = gepard_tiny / "nanocodec/nemo-nano-codec-22khz-1.89kbps-21.5fps.nemo"
    cfg, state = read_nemo(archive)
    state.pop("audio_decoder.post_conv.conv.bias")
    state["audio_decoder.extra.weight"] = state["audio_decoder.pre_conv.conv.bias"].clone()
    state["audio_encoder.pre_conv.conv.bias"] = state["audio_decoder.pre_conv.conv.bias"].clone()  # not used
    write_nemo(tmp_path / "bad.nemo", cfg, state)
    with pytest.raises(CheckpointError, match=r"missing \['post_conv.conv.bias'\], unexpected \['extra.weight'\]"):
        load_codec(tmp_path / "bad.nemo")


@pytest.mark.parity
def test_reference_classes_load_every_tensor(gepard_tiny: Path) -> None:
    """Qwen3_5TextModel (built by AutoConfig from config.json, ref5) + vLLM-Omni's talker modules load
    model.safetensors strictly: their state dict is exactly the loader's tensor set."""
    got = reference(gepard_tiny, "load")
    info = read_checkpoint(gepard_tiny)
    assert sorted(str(n) for n in got["names"]) == sorted(tensor_shapes(info))


@pytest.mark.slow
def test_make_tiny_then_say_from_the_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`triton-tts make-tiny --family gepard` then `say --checkpoint` (exported into the cache)."""
    import soundfile as sf

    from triton_tts.cli import main

    monkeypatch.setenv("TRITON_TTS_CACHE", str(tmp_path / "cache"))
    ckpt = tmp_path / "gepard-tiny"
    assert main(["make-tiny", "--family", "gepard", "--out", str(ckpt)]) == 0
    assert is_gepard(ckpt)
    out = tmp_path / "x.wav"
    assert main(["say", "--checkpoint", str(ckpt), "-o", str(out), "--seed", "1", "--max-new-tokens", "5",
                 "Hello there."]) == 0
    audio, sr = sf.read(str(out), dtype="float32")
    assert sr == 22050 and 0 < audio.shape[0] <= 5 * 1024 and audio.shape[0] % 1024 == 0
