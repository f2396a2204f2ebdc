"""A random-weight OmniVoice checkpoint in the released layout (k2-fsa/OmniVoice):

    config.json              OmniVoiceConfig (model_type "omnivoice", llm_config = a Qwen3 config)
    model.safetensors        llm.* (Qwen3Model), audio_embeddings.weight, audio_heads.weight,
                             codebook_layer_offsets
    tokenizer.json           a byte-level BPE with the 7 prompt special tokens added
    tokenizer_config.json
    audio_tokenizer/         the Higgs Audio v2 tokenizer: config.json, preprocessor_config.json and
                             model.safetensors with every tensor of HiggsAudioV2TokenizerModel: the
                             decoder side (quantizer, fc2, acoustic_decoder) and the encoder side
                             (semantic_model = HuBERT, encoder_semantic, acoustic_encoder = DAC
                             encoder, fc, and the unused decoder_semantic and fc1)

The weights are drawn per tensor (export.tiny_weights), so the same arguments give the same files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from export.omnivoice.codec import codec_modules
from export.tiny_weights import (
    TensorInit,
    byte_level_bpe,
    checkpoint_writer,
    init_common,
    json_bytes,
    module_tensors,
    save_weights,
    tiny_size,
    write_files,
)
from ttscore.contract import omnivoice as contract
from ttscore.runtime.checkpoint_kit import config_model_type

TEXT_VOCAB = 1200  # the text vocabulary must cover the audio ids (text embeddings are looked up everywhere)
REAL_TEXT_VOCAB = 151676  # Qwen3's 151669 ids + the 7 prompt tokens

LLM_TINY: dict[str, Any] = {
    "model_type": "qwen3", "architectures": ["Qwen3Model"], "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "vocab_size": TEXT_VOCAB, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
    "hidden_act": "silu", "attention_bias": False, "attention_dropout": 0.0, "tie_word_embeddings": False,
    "use_sliding_window": False, "sliding_window": None, "max_window_layers": 2, "torch_dtype": "float32",
    "rope_scaling": None, "initializer_range": 0.02, "use_cache": False, "bos_token_id": None,
    "eos_token_id": None, "pad_token_id": None,
}

# The Higgs Audio v2 tokenizer at tiny dims: hop 8*5*4*2*3 = 960 at 24 kHz (25 frames/s); 8 codebooks
# of 1024 (target bandwidth 2 kbps / (25 fps * 10 bits)).
CODEC_TINY: dict[str, Any] = {
    "model_type": "higgs_audio_v2_tokenizer",
    "architectures": ["HiggsAudioV2TokenizerModel"],
    "sample_rate": contract.SAMPLE_RATE,
    "semantic_sample_rate": 16000,
    "target_bandwidths": [0.5, 1, 1.5, 2],
    "codebook_size": contract.CODEBOOK_SIZE,
    "codebook_dim": 8,
    "kernel_size": 3,
    "channel_ratios": [1, 1],
    "strides": [1, 1],
    "block_dilations": [1, 1],
    "unit_kernel_size": 3,
    "downsample_factor": 320,
    "initializer_range": 0.02,
    "acoustic_model_config": {
        "model_type": "dac", "encoder_hidden_size": 4, "downsampling_ratios": [8, 5, 4, 2, 3],
        "decoder_hidden_size": 32, "upsampling_ratios": [8, 5, 4, 2, 3], "hidden_size": 16,
        "codebook_size": contract.CODEBOOK_SIZE, "codebook_dim": 8, "n_codebooks": 8, "sampling_rate": 24000,
    },
    # HuBERT with its released conv feature extractor's kernels and strides (320 samples per frame at
    # 16 kHz: 50 frames/s, every second one kept) at tiny widths.
    "semantic_model_config": {"model_type": "hubert", "hidden_size": 16, "num_hidden_layers": 1,
                              "num_attention_heads": 2, "intermediate_size": 32, "mask_time_prob": 0.0,
                              "conv_dim": [8] * 7, "conv_stride": [5, 2, 2, 2, 2, 2, 2],
                              "conv_kernel": [10, 3, 3, 3, 3, 2, 2], "num_conv_pos_embeddings": 16,
                              "num_conv_pos_embedding_groups": 4},
}
# Real dimensions (random weights, for measurement): Qwen3-0.6B and the released Higgs Audio v2 tokenizer.
LLM_REAL: dict[str, Any] = {**LLM_TINY, "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
                            "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
                            "vocab_size": REAL_TEXT_VOCAB, "max_position_embeddings": 40960, "max_window_layers": 28}
CODEC_REAL: dict[str, Any] = {
    **CODEC_TINY, "codebook_dim": 64,
    "acoustic_model_config": {**CODEC_TINY["acoustic_model_config"], "encoder_hidden_size": 64,
                              "decoder_hidden_size": 1024, "hidden_size": 256, "codebook_dim": 64},
    "semantic_model_config": {"model_type": "hubert", "hidden_size": 768, "num_hidden_layers": 12,
                              "num_attention_heads": 12, "intermediate_size": 3072, "mask_time_prob": 0.0},
}
PREPROCESSOR = {"feature_extractor_type": "DacFeatureExtractor", "feature_size": 1, "hop_length": contract.HOP,
                "padding_side": "right", "padding_value": 0.0, "return_attention_mask": True,
                "sampling_rate": contract.SAMPLE_RATE}


def model_config(size: str = "tiny") -> dict[str, Any]:
    return {
        "architectures": ["OmniVoice"], "model_type": contract.FAMILY, "audio_vocab_size": contract.AUDIO_VOCAB,
        "audio_mask_id": contract.MASK_ID, "num_audio_codebook": contract.NUM_CODEBOOKS,
        "audio_codebook_weights": [8, 8, 6, 6, 4, 4, 2, 2], "llm_config": dict(LLM_REAL if size == "real" else LLM_TINY), "torch_dtype": "float32",
    }


# ---- tokenizer --------------------------------------------------------------------------------------
_CORPUS = ("hello world this is a tiny omnivoice checkpoint the quick brown fox jumps over the lazy dog "
           "speech synthesis nice to meet you how are you today")


def tokenizer_json(vocab_size: int = TEXT_VOCAB) -> str:
    """A byte-level BPE (Qwen's pre-tokenizer and decoder), filled to `vocab_size` - 7 pieces, then the
    special tokens on the last 7 ids."""
    from tokenizers import AddedToken, Tokenizer

    model = json.loads(byte_level_bpe([_CORPUS] * 4).to_str())
    vocab: dict[str, int] = model["model"]["vocab"]
    for i in range(len(vocab), vocab_size - len(contract.SPECIAL_TOKENS)):
        vocab[f"<|unused_{i}|>"] = i
    tok = Tokenizer.from_str(json.dumps(model))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in contract.SPECIAL_TOKENS])
    if tok.get_vocab_size() != vocab_size:
        raise AssertionError(f"tiny tokenizer has {tok.get_vocab_size()} ids, not {vocab_size}")
    text: str = tok.to_str(pretty=True)
    return text


def tokenizer_config() -> dict[str, Any]:
    return {
        "add_prefix_space": False, "bos_token": None, "eos_token": None, "pad_token": None, "unk_token": None,
        "clean_up_tokenization_spaces": False, "model_max_length": 131072, "split_special_tokens": False,
        "additional_special_tokens": list(contract.SPECIAL_TOKENS), "tokenizer_class": "PreTrainedTokenizerFast",
    }


# ---- weights --------------------------------------------------------------------------------------
def _init_module(init: TensorInit, model: Any, prefix: str = "", gains: dict[str, float] | None = None) -> None:
    """Every persistent tensor of `model` (on the meta device), by module type (export.tiny_weights.init_common
    for the common ones), under `prefix`; the codec's codebooks as trained ones look (inited, positive cluster
    sizes)."""
    from torch import nn

    for m in module_tensors(model, prefix, gains):
        full, shapes = m.full, m.shapes
        if isinstance(m.module, (nn.Conv1d, nn.ConvTranspose1d)) and "weight" not in full:  # a weight-normed conv
            if "bias" in full:
                init.normal(full["bias"], shapes["bias"], 0.05)
        elif m.kind == "ParametrizationList":  # weight norm (HuBERT's positional conv): g = original0, v = original1
            init.uniform(full["original0"], shapes["original0"], 0.5, 1.5)
            init.normal(full["original1"], shapes["original1"], 1.0)
        elif m.name.endswith(".codebook"):  # the residual VQ's
            init.normal(full["embed"], shapes["embed"], 1.0)
            init.const(full["inited"], shapes["inited"], 1.0)
            init.uniform(full["cluster_size"], shapes["cluster_size"], 0.5, 2.0)
            init.normal(full["embed_avg"], shapes["embed_avg"], 1.0)
        elif not init_common(init, m, linear_bias=0.05, norm_bias=0.05):
            raise AssertionError(f"no tiny init for {m.kind} ({m.name})")


def model_weights(cfg: dict[str, Any], seed: int) -> dict[str, Any]:
    """model.safetensors: the Qwen3 stack under `llm.`, the audio embeddings and heads, the offsets."""
    import torch
    from transformers import Qwen3Config, Qwen3Model

    llm = {k: v for k, v in cfg["llm_config"].items() if k not in ("model_type", "architectures")}
    with torch.device("meta"):
        stack = Qwen3Model(Qwen3Config(**llm))
    init = TensorInit(seed, "omnivoice", torch.float32)
    _init_module(init, stack, "llm.")
    rows = cfg["num_audio_codebook"] * cfg["audio_vocab_size"]
    hidden = int(llm["hidden_size"])
    init.normal("audio_embeddings.weight", (rows, hidden), 0.3)
    init.normal("audio_heads.weight", (rows, hidden), 2.0 / hidden**0.5)
    tensors = dict(init.tensors)
    tensors["codebook_layer_offsets"] = torch.arange(cfg["num_audio_codebook"]) * cfg["audio_vocab_size"]
    return tensors


def codec_weights(codec: dict[str, Any], seed: int) -> dict[str, Any]:
    """audio_tokenizer/model.safetensors: every tensor of HiggsAudioV2TokenizerModel (export.omnivoice.codec's
    codec_modules, named as its tensors), its decoder side (quantizer, fc2, acoustic_decoder) and encoder side
    (acoustic_encoder = DAC encoder, semantic_model = HuBERT, encoder_semantic, decoder_semantic, fc, fc1)."""
    import torch

    init = TensorInit(seed, "omnivoice-codec", torch.float32)
    with torch.device("meta"):
        module = codec_modules(codec, encoder=True)
    _init_module(init, module, gains={r"quantizer\.quantizers\.\d+\.project_out": 0.5})
    return dict(init.tensors)


def make_tiny_omnivoice(out: Path, seed: int = 0, size: str = "tiny") -> Path:
    """Write a deterministic random-weight OmniVoice checkpoint directory and return its path."""
    tiny = tiny_size(size)
    with checkpoint_writer(out, "an OmniVoice checkpoint", config_model_type(contract.FAMILY)) as tmp:
        cfg = model_config(size)
        codec = CODEC_TINY if tiny else CODEC_REAL
        write_files(tmp, {"config.json": json_bytes(cfg),
                          "tokenizer.json": tokenizer_json(int(cfg["llm_config"]["vocab_size"])),
                          "tokenizer_config.json": json_bytes(tokenizer_config()),
                          "audio_tokenizer/config.json": json_bytes(codec),
                          "audio_tokenizer/preprocessor_config.json": json_bytes(PREPROCESSOR)})
        save_weights(model_weights(cfg, seed), tmp / "model.safetensors")
        save_weights(codec_weights(codec, seed), tmp / "audio_tokenizer" / "model.safetensors")
    return Path(out)
