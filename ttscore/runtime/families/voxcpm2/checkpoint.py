"""A VoxCPM2 checkpoint's config.json, read into the few typed facts export and serving rely on.

Pure: the dict comes from the checkpoint (export) or the manifest (serving). `read_checkpoint`
also checks the directory holds the files the reference loads.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ttscore.contract.errors import CheckpointError
from ttscore.runtime.checkpoint_kit import peek_json, positive_int, read_json, require_files
from ttscore.runtime.weights import read_weights

CHECKPOINT_FILES = ("config.json", "tokenizer.json")
# The weights (ttscore.runtime.weights): `<stem>.safetensors`, or sharded with an index.
WEIGHT_STEMS = ("model", "audiovae")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


@dataclass(frozen=True)
class Stack:
    """One MiniCPM-4 transformer stack (base LM, residual LM, local encoder or LocDiT)."""

    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope: bool


@dataclass(frozen=True)
class VoxCPM2Info:
    lm: Stack
    residual: Stack
    encoder: Stack
    dit: Stack
    vocab_size: int
    scale_emb: float  # applied to text embeddings when use_mup
    patch_size: int
    feat_dim: int
    max_length: int
    mean_mode: bool
    encode_sample_rate: int
    sample_rate: int
    encode_hop: int  # 16 kHz samples per latent frame
    decode_hop: int  # output samples per latent frame
    dtype: str

    @property
    def samples_per_patch(self) -> int:
        return self.patch_size * self.decode_hop

    @property
    def encode_samples_per_patch(self) -> int:
        return self.patch_size * self.encode_hop

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def parse_config(cfg: dict[str, Any]) -> VoxCPM2Info:
    if not isinstance(cfg.get("lm_config"), dict):
        raise CheckpointError("config.json has no lm_config: not a VoxCPM2 checkpoint")
    lm = cfg["lm_config"]
    heads = positive_int(lm, "num_attention_heads", "lm_config.")
    hidden = positive_int(lm, "hidden_size", "lm_config.")
    kv_channels = lm.get("kv_channels") or hidden // heads

    def stack(section: dict[str, Any] | None, layers: int | None = None, rope: bool = True) -> Stack:
        if section is None:
            return Stack(hidden, positive_int(lm, "intermediate_size", "lm_config."),
                         layers or positive_int(lm, "num_hidden_layers", "lm_config."), heads,
                         positive_int(lm, "num_key_value_heads", "lm_config."), int(kv_channels), rope)
        h, nh = positive_int(section, "hidden_dim", ""), positive_int(section, "num_heads", "")
        # The local modules copy lm_config and override width/depth/heads/kv_channels; the kv heads
        # and the RoPE factors (so head_dim must match their length) stay the LM's.
        return Stack(h, positive_int(section, "ffn_dim", ""), positive_int(section, "num_layers", ""), nh,
                     positive_int(lm, "num_key_value_heads", "lm_config."), int(section.get("kv_channels") or h // nh), True)

    for key in ("encoder_config", "dit_config"):
        if not isinstance(cfg.get(key), dict):
            raise CheckpointError(f"config.json has no {key}")
    vae = cfg.get("audio_vae_config") or {}
    enc_rates = vae.get("encoder_rates", [2, 5, 8, 8])
    dec_rates = vae.get("decoder_rates", [8, 6, 5, 2, 2, 2])
    feat_dim = int(cfg.get("feat_dim", 64))
    if int(vae.get("latent_dim", 64)) != feat_dim:
        raise CheckpointError(f"config.json: audio_vae_config.latent_dim {vae.get('latent_dim')} != feat_dim {feat_dim}")
    if vae.get("use_noise_block"):
        raise CheckpointError("config.json: audio_vae_config.use_noise_block (hidden decoder noise) is not supported")
    return VoxCPM2Info(
        lm=stack(None),
        residual=stack(None, int(cfg.get("residual_lm_num_layers", 8)), rope=not cfg.get("residual_lm_no_rope", False)),
        encoder=stack(cfg["encoder_config"]),
        dit=stack(cfg["dit_config"]),
        vocab_size=positive_int(lm, "vocab_size", "lm_config."),
        scale_emb=float(lm.get("scale_emb", 1.0)) if lm.get("use_mup", True) else 1.0,
        patch_size=int(cfg.get("patch_size", 4)),
        feat_dim=feat_dim,
        max_length=int(cfg.get("max_length", 8192)),
        mean_mode=bool(cfg["dit_config"].get("dit_mean_mode", False)),
        encode_sample_rate=int(vae.get("sample_rate", 16000)),
        sample_rate=int(vae.get("out_sample_rate", vae.get("sample_rate", 48000))),
        encode_hop=int(math.prod(enc_rates)),
        decode_hop=int(math.prod(dec_rates)),
        dtype=str(cfg.get("dtype", "bfloat16")),
    )


def is_voxcpm2(checkpoint: Path) -> bool:
    """Whether the directory's config.json is a VoxCPM2 config (the export dispatch)."""
    cfg = peek_json(checkpoint / "config.json")
    return cfg is not None and isinstance(cfg.get("lm_config"), dict) and "dit_config" in cfg


def read_checkpoint(checkpoint: Path) -> VoxCPM2Info:
    require_files(checkpoint, CHECKPOINT_FILES)
    for stem in WEIGHT_STEMS:
        read_weights(checkpoint, stem)
    return parse_config(read_json(checkpoint / "config.json"))
