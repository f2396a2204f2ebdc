"""Breeze-TTS-2 tiny checkpoints: the released layout (vLLM-Omni's BreezeTTS2Config, real tensor names,
Gemma-style tokenizer, the Qwen3-TTS 12 Hz tokenizer as audio_tokenizer/), loadable strictly by the
reference classes in ref5; the loader refuses missing and unexpected tensors by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from breeze_tts_2_fixtures import reference

from ttscore.contract import breeze_tts_2 as spec
from ttscore.contract.errors import CheckpointError
from ttscore.runtime.families.breeze_tts_2.checkpoint import is_breeze, read_checkpoint, tensor_shapes

pytestmark = pytest.mark.export


def test_layout_and_config(breeze_tiny: Path) -> None:
    files = sorted(str(p.relative_to(breeze_tiny)) for p in breeze_tiny.rglob("*") if p.is_file())
    assert files == ["audio_tokenizer/config.json", "audio_tokenizer/configuration.json",
                     "audio_tokenizer/model.safetensors", "audio_tokenizer/preprocessor_config.json", "config.json",
                     "model.safetensors", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"]
    cfg = json.loads((breeze_tiny / "config.json").read_text())
    assert cfg["model_type"] == "breeze" and cfg["num_codebooks"] == 16 and cfg["vocab_size"] == 2051
    assert "dropout_rate" in cfg["text_encoder_config"]
    assert cfg["depth_decoder_config"]["rope_scaling"]["rope_type"] == "llama3"
    assert is_breeze(breeze_tiny)
    info = read_checkpoint(breeze_tiny)
    assert info.codebook_size == 2048 and info.eos_code == 2051 and info.sample_rate == spec.SAMPLE_RATE
    assert "sliding_attention" in info.text.layer_types and "full_attention" in info.text.layer_types


def test_tokenizer_has_the_breeze_specials(breeze_tiny: Path) -> None:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(breeze_tiny / "tokenizer.json"))
    cfg = json.loads((breeze_tiny / "config.json").read_text())
    for t in (*(f"[{v}]" for v in spec.VOICES), spec.INSTRUCTION_BOS, spec.INSTRUCTION_EOS):
        assert tok.token_to_id(t) is not None, t
    assert tok.token_to_id(spec.AUDIO_TAG) == cfg["audio_token_id"]
    assert tok.token_to_id(spec.AUDIO_EOS) == cfg["audio_eos_token_id"]
    enc = tok.encode("[S3]<ins_bos>calm<ins_eos>Hello 你好")
    assert enc.tokens[:3] == ["<bos>", "[S3]", "<ins_bos>"] and "<unk>" not in enc.tokens  # byte fallback


def test_audio_tokenizer_is_the_qwen3_tts_one(breeze_tiny: Path) -> None:
    from export.qwen3_tts.tiny import speech_tokenizer_config

    assert json.loads((breeze_tiny / "audio_tokenizer/config.json").read_text()) == speech_tokenizer_config("tiny")


def test_loader_refuses_missing_and_unexpected_tensors(breeze_tiny: Path, tmp_path: Path) -> None:
    import shutil

    from safetensors.torch import load_file, save_file

    bad = tmp_path / "bad"
    shutil.copytree(breeze_tiny, bad)
    weights = load_file(str(bad / "model.safetensors"))
    weights.pop("depth_decoder.codebooks_head.weight")
    weights["text_encoder.extra.weight"] = weights["text_encoder.norm.weight"].clone()
    save_file(weights, str(bad / "model.safetensors"))
    with pytest.raises(CheckpointError, match=r"missing 1 tensor\(s\): depth_decoder.codebooks_head.weight; "
                                              r"unexpected 1 tensor\(s\): text_encoder.extra.weight"):
        read_checkpoint(bad)


@pytest.mark.parity
def test_reference_classes_load_every_tensor(breeze_tiny: Path) -> None:
    """T5Gemma2TextEncoder + Qwen3Model + LlamaModel (ref5, transformers 5.14.1) load model.safetensors
    strictly: their state dict is exactly the checkpoint's tensor set."""
    got = reference(breeze_tiny, "load")
    cfg = json.loads((breeze_tiny / "config.json").read_text())
    assert sorted(str(n) for n in got["names"]) == sorted(tensor_shapes(cfg))
