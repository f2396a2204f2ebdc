"""Deterministic random-weight Gepard-1.0 checkpoints in the released two-part layout.

``make_tiny_gepard(out)`` writes::

    config.json  gepard_config.json  model.safetensors  tokenizer.json  tokenizer_config.json
    nanocodec/nemo-nano-codec-22khz-1.89kbps-21.5fps.nemo   (model_config.yaml + model_weights.ckpt)

`config.json` is a bare `qwen3_5_text` config (every layer `full_attention`, `partial_rotary_factor`
1.0 at the top level and in `rope_parameters`, as gepard-train writes both); `gepard_config.json`
is gepard-train's sidecar schema (`audio_heads` level_audio_0..31 = [8, 7, 6, 6] x 8, special
tokens, text repetition, codec, voice cloning), which vLLM-Omni's GepardConfig parses;
`model.safetensors` holds the released names (`model.*`, `codebook_heads.{i}`, `stop_head`,
`audio_embeddings.{i}`, `audio_embed_proj.{0,2}`, `audio_embed_scale`, `null_prefix`). The tiny
special ids follow the small byte-level BPE tokenizer's vocabulary (the real ones are 248070..248077).
The NanoCodec archive is NeMo's layout: `model_config.yaml` naming `CausalHiFiGANDecoder` and
`GroupFiniteScalarQuantizer` (8 groups x [8, 7, 6, 6], up-sample rates 8 8 4 2 2 = 1024 samples a
frame at 22050 Hz at every size; 864 base channels real, 64 tiny) and `model_weights.ckpt`, a torch
state dict of the decoder (`audio_decoder.*`, weight norm as parametrizations).

Weights draw per tensor from export.tiny_weights (sha256(seed, name) streams): same arguments, same bytes.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from export.tiny_weights import (
    TensorInit,
    byte_level_bpe,
    checkpoint_writer,
    json_bytes,
    save_weights,
    tiny_size,
    write_files,
)
from ttscore.contract import gepard as spec
from ttscore.runtime.families.gepard.checkpoint import CODEC_DIR, is_gepard, parse_config, tensor_shapes

CODEC_FILE = "nemo-nano-codec-22khz-1.89kbps-21.5fps.nemo"
_CORPUS = (
    "Hello, this is Gepard speaking. The quick brown fox jumps over the lazy dog. Good morning, how are you "
    "today? Numbers one two three four five. A short test of the speech system, spoken clearly and calmly."
)


def _sizes(size: str) -> dict[str, Any]:
    if tiny_size(size):
        return dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16)
    # real: gepard-train's qwen3_5-full-attn-only-14 (hidden 1024, 8 heads); the rest Qwen3.5-0.8B's
    return dict(hidden_size=1024, intermediate_size=3584, num_hidden_layers=14, num_attention_heads=8,
                num_key_value_heads=2, head_dim=256)


@lru_cache(maxsize=1)
def tokenizer_json() -> str:
    """A small byte-level BPE (Qwen's pre-tokenizer family)."""
    return str(byte_level_bpe([_CORPUS], ["<|endoftext|>"]).to_str())


def tokenizer_vocab() -> int:
    from tokenizers import Tokenizer

    return int(Tokenizer.from_str(tokenizer_json()).get_vocab_size(with_added_tokens=True))


def special_tokens(size: str) -> dict[str, int]:
    base = 248070 if size == "real" else tokenizer_vocab()
    return {"start_of_speech": base, "end_of_speech": base + 1, "start_of_text": base + 3, "end_of_text": base + 4,
            "tts_pad": base + 6, "tokeniser_length": base + 7}


def model_config(size: str = "tiny") -> dict[str, Any]:
    s = _sizes(size)
    real = size == "real"
    vocab = 248320 if real else -(-(special_tokens(size)["tokeniser_length"] + spec.NUM_SPEAKER_SLOTS) // 16) * 16
    rope = {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 1.0}
    return {
        "architectures": ["Qwen3_5ForCausalLM"],
        "model_type": "qwen3_5_text",
        **s,
        "vocab_size": vocab,
        "hidden_act": "silu",
        "max_position_embeddings": 32768 if real else 2048,
        "rms_norm_eps": 1e-6,
        "layer_types": ["full_attention"] * s["num_hidden_layers"],
        "partial_rotary_factor": 1.0,
        "rope_parameters": rope,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": True,
        "use_cache": True,
        "bos_token_id": None,
        "eos_token_id": special_tokens(size)["end_of_speech"],
        "pad_token_id": special_tokens(size)["tts_pad"],
        "dtype": "bfloat16",
        "transformers_version": "5.3.0",
    }


def sidecar_config(size: str = "tiny") -> dict[str, Any]:
    cfg = model_config(size)
    backbone = {k: v for k, v in cfg.items() if k not in ("architectures", "transformers_version")}
    return {
        "backbone_config": backbone,
        "audio_heads": {f"level_audio_{i}": n for i, n in enumerate(spec.head_levels())},
        "audio_embed_dim": 32,
        "special_tokens": special_tokens(size),
        "text_repetition": {"enabled": True, "target_text_tokens": 16, "apply_below": 13, "max_repeats": 8},
        "codec": {"codec_id": "nvidia/nemo-nano-codec-22khz-1.89kbps-21.5fps", "sample_rate": spec.SAMPLE_RATE,
                  "frame_rate_hz": 21.5, "fsq_levels": list(spec.FSQ_LEVELS), "num_layers": spec.NUM_GROUPS,
                  "do_unfold": True},
        "voice_cloning": {"enabled": True, "compressor": {"num_queries": spec.NUM_SPEAKER_SLOTS, "num_layers": 2,
                                                          "num_heads": 8, "d_model": cfg["hidden_size"],
                                                          "ffn_hidden_size_multiplier": 4}},
        "stop_threshold": spec.STOP_THRESHOLD,
        "stop_loss_weight": 2.0,
        "stop_pos_weight": 25.0,
        "temperature": spec.TEMPERATURE,
    }


def codec_config(size: str = "tiny") -> dict[str, Any]:
    from export.gepard.codec import DECODER_TARGET, QUANTIZER_TARGET

    return {
        "sample_rate": spec.SAMPLE_RATE,
        "samples_per_frame": spec.SAMPLES_PER_FRAME,
        "vector_quantizer": {"_target_": QUANTIZER_TARGET, "num_groups": spec.NUM_GROUPS,
                             "num_levels_per_group": list(spec.FSQ_LEVELS)},
        "audio_decoder": {"_target_": DECODER_TARGET, "input_dim": spec.NUM_CODEBOOKS,
                          "up_sample_rates": [8, 8, 4, 2, 2], "base_channels": 864 if size == "real" else 64,
                          "in_kernel_size": 7, "out_kernel_size": 3, "resblock_kernel_sizes": [3, 7, 11],
                          "resblock_dilation_sizes": [1, 3, 5], "activation": "half_snake",
                          "output_activation": "clamp", "pad_mode": "zeros", "n_groups_equal_to_out_channels": True},
    }


def checkpoint_weights(cfg: dict[str, Any], sidecar: dict[str, Any], seed: int, dtype: Any) -> dict[str, Any]:
    """Scales: linear ~ 1/sqrt(fan_in); embeddings and null_prefix ~ N(0, 1); zero-centred norms w ~
    N(0, 0.1); the stop head biased low so that utterances run a few frames before it may fire."""
    init = TensorInit(seed, "gepard", dtype)
    for name, shape in tensor_shapes(parse_config(cfg, sidecar)).items():
        if name.endswith("norm.weight"):
            init.normal(name, shape, 0.1)
        elif name.endswith(".bias"):
            init.normal(name, shape, 0.1, mean=-1.2 if name == "stop_head.bias" else 0.0)
        elif name == "audio_embed_scale":
            init.const(name, shape, 0.75)
        elif name.startswith(("model.embed_tokens", "audio_embeddings.")) or name == "null_prefix":
            init.normal(name, shape, 1.0)
        elif name.startswith("codebook_heads."):
            init.normal(name, shape, 3.0 / shape[-1] ** 0.5)  # peaked enough at temperature 0.3 to vary
        else:
            init.normal(name, shape, 1.0 / shape[-1] ** 0.5)
    return init.tensors


def codec_weights(cfg: dict[str, Any], seed: int) -> dict[str, Any]:
    """The decoder's state dict (NeMo's names): weight-norm magnitudes 1 (the output conv 0.3),
    directions, biases ~ N(0, 0.05), snake alphas 1 +- 0.1."""
    import torch

    from export.gepard.codec import NanoCodec

    init = TensorInit(seed, "gepard-nanocodec", torch.float32)
    for name, t in NanoCodec(cfg).state_dict().items():
        shape = tuple(t.shape)
        full = f"audio_decoder.{name}" if not name.startswith("audio_decoder.") else name
        if name.endswith("original0"):
            init.const(full, shape, 0.3 if "post_conv" in name else 1.0)
        elif name.endswith("original1"):
            init.normal(full, shape, 1.0)
        elif name.endswith("alpha"):
            init.normal(full, shape, 0.1, mean=1.0)
        else:
            init.normal(full, shape, 0.05)
    return init.tensors


def make_tiny_gepard(out: Path, seed: int = 0, size: str = "tiny") -> Path:
    """Write the checkpoint directory (replacing an empty one or a Gepard checkpoint) and return it."""
    import torch

    from export.gepard.codec import write_nemo

    _sizes(size)
    cfg, sidecar, ccfg = model_config(size), sidecar_config(size), codec_config(size)
    with checkpoint_writer(out, "a Gepard-1.0 checkpoint", is_gepard) as tmp:
        write_files(tmp, {
            "config.json": json_bytes(cfg),
            "gepard_config.json": json_bytes(sidecar),
            "tokenizer.json": tokenizer_json(),
            "tokenizer_config.json": json_bytes({"tokenizer_class": "Qwen2Tokenizer", "add_prefix_space": False,
                                                 "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
                                                 "model_max_length": 262144}),
        })
        save_weights(checkpoint_weights(cfg, sidecar, seed, torch.bfloat16), tmp / "model.safetensors")
        (tmp / CODEC_DIR).mkdir()
        write_nemo(tmp / CODEC_DIR / CODEC_FILE, ccfg, codec_weights(ccfg, seed))
    return Path(out)
