"""Deterministic random-weight VoxCPM2 checkpoints in the real on-disk layout.

``make_tiny_voxcpm2(out)`` writes what ``VoxCPM2Model.from_local`` reads::

    config.json            VoxCPMConfig (pydantic) JSON: lm_config, encoder/dit/audio_vae configs
    tokenizer.json         a small SentencePiece-style BPE (byte fallback) built with `tokenizers`
    tokenizer_config.json  LlamaTokenizerFast
    special_tokens_map.json
    model.safetensors      every VoxCPM2Model tensor except the AudioVAE's
    audiovae.safetensors   the AudioVAE's tensors (weight-norm g/v pairs, sample-rate buckets)

What is real at every size: the config schema, the hard-wired token ids (audio start/end 101/102,
reference audio start/end 103/104), patch size 4, the AudioVAE rates (16 kHz in, 640 samples per
latent frame; 48 kHz out, 1920 samples per latent frame) and sample-rate buckets, the residual LM
without RoPE, and the tensor names. ``size="tiny"`` shrinks widths and depths (latent 16 instead of 64);
``size="real"`` uses the released dimensions (random bf16 weights, ~2.3 B parameters, for memory
and throughput measurements) with the same tiny tokenizer.

Weights come from export.tiny_weights' per-tensor PCG64 streams (seeded by sha256(seed, name)), so a file
depends only on (seed, size). Every tensor of the reference's state dict must be claimed by an init
rule here; an unknown module type is an error. Scales keep every component visible in parity tests:
linear weights ~ 1/sqrt(fan_in) with non-zero biases, RMSNorm weights 1 +- 0.1, the AudioVAE
decoder's residual branches damped and its last conv scaled so the 48 kHz waveform stays well
inside the final tanh.
"""

from __future__ import annotations

import copy
import json
import os
from collections import Counter
from functools import lru_cache
from pathlib import Path
from typing import Any

from export.tiny_weights import (
    TensorInit,
    check_complete,
    checkpoint_writer,
    conv_fan_in,
    init_common,
    json_bytes,
    learn_bpe_merges,
    module_tensors,
    save_weights,
    tensor_rng,
    tiny_size,
    write_files,
)

MODEL_TYPE = "voxcpm2"  # written as "architecture" (the released config names its family so)

# Hard-wired in VoxCPM2Model (not in any config): the prompt's structural token ids.
AUDIO_START_ID, AUDIO_END_ID = 101, 102
REF_AUDIO_START_ID, REF_AUDIO_END_ID = 103, 104
REAL_VOCAB_SIZE = 73448  # MiniCPM-4 text vocabulary (embedding rows)


def _rope_scaling(head_dim: int, max_pos: int, original: int) -> dict[str, Any]:
    half = head_dim // 2
    return {
        "type": "longrope",
        # Non-trivial factors so that a wrong RoPE table shows up in parity (the real ones are ~1..50).
        "long_factor": [round(1.0 + 0.35 * i, 4) for i in range(half)],
        "short_factor": [round(1.0 + 0.05 * i, 4) for i in range(half)],
        "original_max_position_embeddings": original,
    }


def model_config(size: str = "tiny") -> dict[str, Any]:
    """config.json for `size` (tiny or the released dimensions)."""
    if not tiny_size(size):
        lm = {
            "bos_token_id": 1, "eos_token_id": 2, "hidden_size": 2048, "intermediate_size": 6144,
            "max_position_embeddings": 32768, "num_attention_heads": 16, "num_hidden_layers": 28,
            "num_key_value_heads": 2, "rms_norm_eps": 1e-05, "rope_theta": 10000, "kv_channels": 128,
            "rope_scaling": _rope_scaling(128, 32768, 32768), "vocab_size": REAL_VOCAB_SIZE,
            "use_mup": False, "scale_emb": 12, "dim_model_base": 256, "scale_depth": 1.4,
        }
        local = {"hidden_dim": 1024, "ffn_dim": 4096, "num_heads": 16, "num_layers": 12, "kv_channels": 128}
        vae = {
            "encoder_dim": 128, "encoder_rates": [2, 5, 8, 8], "latent_dim": 64, "decoder_dim": 2048,
            "decoder_rates": [8, 6, 5, 2, 2, 2], "depthwise": True, "sample_rate": 16000,
            "out_sample_rate": 48000, "use_noise_block": False, "sr_bin_boundaries": [20000, 30000, 40000],
            "cond_type": "scale_bias", "cond_dim": 128, "cond_out_layer": False,
        }
        feat_dim, sq_dim, residual_layers, max_length, dtype = 64, 512, 8, 8192, "bfloat16"
    else:
        # max_position_embeddings above the original length: the long factors and the LongRoPE
        # magnitude scaling (sqrt(1 + ln(s)/ln(orig))) are both exercised.
        lm = {
            "bos_token_id": 1, "eos_token_id": 2, "hidden_size": 64, "intermediate_size": 128,
            "max_position_embeddings": 4096, "num_attention_heads": 4, "num_hidden_layers": 2,
            "num_key_value_heads": 2, "rms_norm_eps": 1e-05, "rope_theta": 10000, "kv_channels": 16,
            "rope_scaling": _rope_scaling(16, 4096, 2048), "vocab_size": len(_vocab()),
            "use_mup": True, "scale_emb": 1.5, "dim_model_base": 32, "scale_depth": 1.4,
        }
        local = {"hidden_dim": 32, "ffn_dim": 64, "num_heads": 2, "num_layers": 2, "kv_channels": 16}
        vae = {
            "encoder_dim": 8, "encoder_rates": [2, 5, 8, 8], "latent_dim": 16, "decoder_dim": 128,
            "decoder_rates": [8, 6, 5, 2, 2, 2], "depthwise": True, "sample_rate": 16000,
            "out_sample_rate": 48000, "use_noise_block": False, "sr_bin_boundaries": [20000, 30000, 40000],
            "cond_type": "scale_bias", "cond_dim": 128, "cond_out_layer": False,
        }
        feat_dim, sq_dim, residual_layers, max_length, dtype = 16, 32, 1, 1024, "float32"
    return {
        "architecture": MODEL_TYPE,
        "lm_config": lm,
        "patch_size": 4,
        "feat_dim": feat_dim,
        "residual_lm_num_layers": residual_layers,
        "residual_lm_no_rope": True,
        "scalar_quantization_latent_dim": sq_dim,
        "scalar_quantization_scale": 9,
        "encoder_config": dict(local),
        "dit_config": {
            **local,
            "dit_mean_mode": False,
            "cfm_config": {
                "sigma_min": 1e-06, "solver": "euler", "t_scheduler": "log-norm",
                "training_cfg_rate": 0.1, "inference_cfg_rate": 1.0, "reg_loss_type": "l1",
                "ratio_r_neq_t_range": [0.25, 0.75], "noise_cond_prob_range": [0.0, 0.0],
                "noise_cond_scale": 0.0,
            },
        },
        "audio_vae_config": vae,
        "max_length": max_length,
        "device": "cuda",
        "dtype": dtype,
    }


# ---- tokenizer ------------------------------------------------------------------------------------
# SentencePiece-style (as MiniCPM-4's): "▁" marks a word start, unknown characters fall back to
# <0xNN> byte tokens. Ids 0..2 are <unk> <s> </s>, 3..258 the byte tokens (so the structural ids
# 101..104 are byte tokens no text maps to: the corpus covers the printable ASCII range), then
# characters and merges. A few multi-character CJK tokens exercise the reference's rule that
# splits them into single characters.
_CORPUS = """
Hello world. This is a tiny voice for the tests. The model speaks the text it is given, and the
voice of the reference audio is cloned when one is given. Streaming speech arrives in small chunks.
Numbers 0 1 2 3 4 5 6 7 8 9, punctuation ! ? ; : ' " ( ) - and so on. VoxCPM2 speaks 48 kHz audio.
你好世界。语音合成的测试。你好，世界！
"""
_CJK_WORDS = ("你好", "世界", "语音", "合成")
_NUM_MERGES = 120


@lru_cache(maxsize=1)
def _learn_merges() -> tuple[tuple[str, str], ...]:
    words: Counter[tuple[str, ...]] = Counter()
    for word in _CORPUS.split():
        words[tuple("▁" + word)] += 1
    for word in _CJK_WORDS:
        words[tuple(word)] += 20
    return learn_bpe_merges(words, _NUM_MERGES)


@lru_cache(maxsize=1)
def _vocab() -> dict[str, int]:
    vocab: dict[str, int] = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for byte in range(256):
        vocab[f"<0x{byte:02X}>"] = len(vocab)
    chars = sorted({c for c in _CORPUS if not c.isspace()} | {"▁"})
    for c in chars:
        vocab.setdefault(c, len(vocab))
    for left, right in _learn_merges():
        vocab.setdefault(left + right, len(vocab))
    return vocab


def tokenizer_json() -> str:
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers

    tok = Tokenizer(
        models.BPE(vocab=_vocab(), merges=list(_learn_merges()), unk_token="<unk>", byte_fallback=True, fuse_unk=True)
    )
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("<unk>", "<s>", "</s>")])
    text: str = tok.to_str(pretty=True)
    return text


def tokenizer_config() -> dict[str, Any]:
    return {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "clean_up_tokenization_spaces": False,
        "legacy": True,
        "model_max_length": 32768,
        "tokenizer_class": "LlamaTokenizerFast",
    }


SPECIAL_TOKENS_MAP = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}


# ---- weights --------------------------------------------------------------------------------------
def _meta_model(cfg: dict[str, Any]) -> Any:
    """VoxCPM2Model on the meta device (no tokenizer needed: a stand-in with an empty vocab)."""
    import torch

    from .reference import reference_classes

    classes = reference_classes()
    config = classes["config"].model_validate(copy.deepcopy(cfg))

    class _NoVocab:
        vocab: dict[str, int] = {}  # noqa: RUF012

    with torch.device("meta"):
        vae = classes["vae"](config=config.audio_vae_config)
        return classes["model"](config, _NoVocab(), vae, device="cpu")


def _weight_norm_pair(init: TensorInit, prefix: str, v_shape: tuple[int, ...], g_shape: tuple[int, ...], fan_in: int,
                      gain: float) -> None:
    """weight = g * v / |v| (norm over every dim but 0): draw v, pick g so the weight is ~gain/sqrt(fan_in)."""
    import numpy as np
    import torch

    v = tensor_rng(init.seed, init.scope, prefix + "weight_v").standard_normal(v_shape, dtype=np.float32)
    norm = np.sqrt((v.reshape(v.shape[0], -1) ** 2).sum(axis=1)).astype(np.float32)
    g = (norm * np.float32(gain / fan_in**0.5)).reshape(g_shape).astype(np.float32)
    init.tensors[prefix + "weight_v"] = torch.from_numpy(v).to(init.dtype)
    init.tensors[prefix + "weight_g"] = torch.from_numpy(g).to(init.dtype)


def _init_tensors(init: TensorInit, model: Any, gains: dict[str, float], constants: dict[str, Any]) -> None:
    import re

    from torch import nn

    for m in module_tensors(model, gains=gains):
        mod, mod_name, shape, kind, gain = m.module, m.name, m.shapes, m.kind, m.gain
        pre, own = f"{mod_name}." if mod_name else "", list(shape)
        if isinstance(mod, nn.Conv1d | nn.ConvTranspose1d) and "weight_v" in shape:
            _weight_norm_pair(init, pre, shape["weight_v"], shape["weight_g"], conv_fan_in(mod), gain)
            if "bias" in shape:
                init.normal(pre + "bias", shape["bias"], 0.02)
        elif isinstance(mod, nn.Embedding) and re.search(r"scale_embed$", mod_name):
            init.normal(pre + "weight", shape["weight"], 0.1, mean=1.0)
        elif isinstance(mod, nn.Embedding) and re.search(r"bias_embed$", mod_name):
            init.normal(pre + "weight", shape["weight"], 0.05)
        elif kind == "VoxCPMLocEnc":
            init.normal(pre + "special_token", shape["special_token"], 1.0)
            rest = [n for n in own if n != "special_token"]
            if rest:
                raise AssertionError(f"no init rule for {kind} tensors {rest}")
        elif kind == "CausalDecoder" and own == ["sr_bin_boundaries"]:
            init.tensors[pre + "sr_bin_boundaries"] = constants[pre + "sr_bin_boundaries"]
        elif not init_common(init, m, linear_bias=0.1, norm_bias=0.1):
            raise AssertionError(f"no init rule for {kind} ({mod_name}): {own}")
    check_complete(init, model)


def checkpoint_weights(cfg: dict[str, Any], seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(model.safetensors tensors, audiovae.safetensors tensors) for config `cfg`."""
    import torch

    model = _meta_model(cfg)
    dtype = torch.bfloat16 if cfg["dtype"] in ("bfloat16", "bf16") else torch.float32
    init = TensorInit(seed, "voxcpm2", torch.float32)
    n_dec = len(model.audio_vae.decoder.model)
    gains = {
        # AudioVAE decoder: damped residual branches (the level must not grow through 18 units) and
        # a small last conv, so the 48 kHz waveform sits well inside the final tanh.
        r"audio_vae\.decoder\.model\.\d+\.block\.\d+\.block\.3": 0.3,
        rf"audio_vae\.decoder\.model\.{n_dec - 2}": 0.05,
        r"audio_vae\.encoder\.block\.\d+\.block\.\d+\.block\.3": 0.3,
        # Scalar quantization keeps tanh(in_proj(h)) off the +-1 rails.
        r"fsq_layer\.in_proj": 0.5,
    }
    # The sample-rate bucket boundaries are a persistent buffer: data from the config, not a weight.
    bounds = torch.tensor(cfg["audio_vae_config"]["sr_bin_boundaries"], dtype=torch.int32)
    _init_tensors(init, model, gains, {"audio_vae.decoder.sr_bin_boundaries": bounds})
    model_tensors: dict[str, Any] = {}
    vae_tensors: dict[str, Any] = {}
    for name, tensor in init.tensors.items():
        if name.startswith("audio_vae."):
            vae_tensors[name[len("audio_vae."):]] = tensor.contiguous()  # the AudioVAE stays float32 (from_local casts it)
        else:
            model_tensors[name] = tensor.to(dtype).contiguous()
    return model_tensors, vae_tensors


def parameter_count(size: str = "tiny") -> dict[str, int]:
    """Parameters per top-level component (meta modules, nothing allocated)."""
    model = _meta_model(model_config(size))
    counts: dict[str, int] = {}
    for name, t in model.state_dict().items():
        group = name.split(".")[0]
        counts[group] = counts.get(group, 0) + int(t.numel())
    return counts


# ---- writing --------------------------------------------------------------------------------------
def _looks_like_checkpoint(path: Path) -> bool:
    try:
        cfg = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(cfg, dict) and "lm_config" in cfg and (path / "audiovae.safetensors").exists()


def make_tiny_voxcpm2(out: Path, seed: int = 0, size: str = "tiny") -> Path:
    """Write a deterministic random-weight VoxCPM2 checkpoint directory and return its path.

    ``out`` may exist only if it is empty or already holds a VoxCPM2 checkpoint (it is replaced).
    Same arguments -> byte-identical files.
    """
    cfg = model_config(size)
    with checkpoint_writer(out, "a VoxCPM2 checkpoint", _looks_like_checkpoint) as tmp:
        write_files(tmp, {"config.json": json_bytes(cfg), "tokenizer.json": tokenizer_json(),
                          "tokenizer_config.json": json_bytes(tokenizer_config()),
                          "special_tokens_map.json": json_bytes(SPECIAL_TOKENS_MAP)})
        model_tensors, vae_tensors = checkpoint_weights(cfg, seed)
        save_weights(vae_tensors, tmp / "audiovae.safetensors")
        del vae_tensors
        save_weights(model_tensors, tmp / "model.safetensors")
        del model_tensors
    return Path(out)


# A tiny startup LoRA adapter (export/voxcpm2/lora.py) for tests: every group enabled with the
# reference LoRAConfig's default target names. B is not zero (as a freshly initialised LoRALinear's
# would be) so the adapter visibly changes the output: alpha / r * B @ A is about half a base weight.
TINY_LORA_R, TINY_LORA_ALPHA = 4, 8


def make_tiny_lora(checkpoint: Path, out: Path, seed: int = 0) -> Path:
    """Write a deterministic random native VoxCPM2 LoRA adapter (lora_config.json +
    lora_weights.safetensors) for the checkpoint `checkpoint` (its config decides the shapes)."""
    import math

    import torch
    from safetensors.torch import save_file

    from export.tiny_weights import TensorInit

    from .lora import ATTENTION, CONFIG, PROJECTIONS, WEIGHTS, LoraConfig, targets

    cfg = json.loads((Path(checkpoint) / "config.json").read_text(encoding="utf-8"))
    groups: dict[str, tuple[str, ...]] = {"lm": ATTENTION, "dit": ATTENTION, "proj": PROJECTIONS}
    lora = LoraConfig(r=TINY_LORA_R, alpha=float(TINY_LORA_ALPHA), groups=groups)

    init = TensorInit(seed, "voxcpm2-lora", torch.float32)
    for name, (fan_in, _fan_out) in sorted(targets(_meta_model(cfg), lora, Path(checkpoint)).items()):
        init.normal(f"{name}.lora_A", (TINY_LORA_R, fan_in), 1.0 / math.sqrt(fan_in))
        init.normal(f"{name}.lora_B", (_fan_out, TINY_LORA_R), 0.25 / math.sqrt(TINY_LORA_R))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    config = {"lora_config": {"enable_lm": True, "enable_dit": True, "enable_proj": True, "r": TINY_LORA_R,
                              "alpha": TINY_LORA_ALPHA, "dropout": 0.0,
                              "target_modules_lm": list(ATTENTION), "target_modules_dit": list(ATTENTION),
                              "target_proj_modules": list(PROJECTIONS)}}
    (out / CONFIG).write_bytes(json_bytes(config))
    save_file(init.tensors, str(out / WEIGHTS), metadata={"format": "pt"})
    os.chmod(out / WEIGHTS, 0o644)
    return out
