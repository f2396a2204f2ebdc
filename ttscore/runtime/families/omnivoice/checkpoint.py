"""An OmniVoice checkpoint's config.json (and audio_tokenizer/config.json), read into the few typed
facts export and serving rely on. Pure: the dicts come from the checkpoint (export) or the manifest
(serving). `read_checkpoint` also checks the directory holds the files the reference loads."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ttscore.contract import omnivoice as contract
from ttscore.contract.errors import CheckpointError
from ttscore.runtime.checkpoint_kit import (
    config_model_type,
    positive_int,
    read_json,
    require_files,
    stack_sizes,
)

CONFIG = "config.json"
CODEC_DIR = "audio_tokenizer"
CHECKPOINT_FILES = (CONFIG, "model.safetensors", "tokenizer.json", f"{CODEC_DIR}/{CONFIG}",
                    f"{CODEC_DIR}/model.safetensors", f"{CODEC_DIR}/preprocessor_config.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
# The manifest table of the reference's language map (lower-case name -> language id), written at export.
LANGUAGE_TABLE = "language_ids"


@dataclass(frozen=True)
class OmniVoiceInfo:
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    text_vocab: int
    num_codebooks: int
    audio_vocab: int
    mask_id: int
    sample_rate: int
    hop: int  # codec samples per frame

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def parse_config(cfg: dict[str, Any], codec: dict[str, Any]) -> OmniVoiceInfo:
    if cfg.get("model_type") != contract.FAMILY or not isinstance(cfg.get("llm_config"), dict):
        raise CheckpointError(f"config.json: not an OmniVoice config (model_type {contract.FAMILY!r} with llm_config)")
    llm = cfg["llm_config"]
    stack = stack_sizes(llm, "llm_config.")
    info = OmniVoiceInfo(
        **{k: stack[k] for k in ("hidden_size", "num_layers", "num_heads", "num_kv_heads", "head_dim")},
        text_vocab=positive_int(llm, "vocab_size", "llm_config."),
        num_codebooks=int(cfg.get("num_audio_codebook", contract.NUM_CODEBOOKS)),
        audio_vocab=int(cfg.get("audio_vocab_size", contract.AUDIO_VOCAB)),
        mask_id=int(cfg.get("audio_mask_id", contract.MASK_ID)),
        sample_rate=int(codec.get("sample_rate", contract.SAMPLE_RATE)),
        hop=math.prod(int(r) for r in codec.get("acoustic_model_config", {}).get("upsampling_ratios", [contract.HOP])),
    )
    fixed = {"num_audio_codebook": (info.num_codebooks, contract.NUM_CODEBOOKS),
             "audio_vocab_size": (info.audio_vocab, contract.AUDIO_VOCAB), "audio_mask_id": (info.mask_id, contract.MASK_ID),
             "audio_tokenizer sample_rate": (info.sample_rate, contract.SAMPLE_RATE),
             "audio_tokenizer hop": (info.hop, contract.HOP)}
    for name, (got, want) in fixed.items():
        if got != want:
            raise CheckpointError(f"config.json: {name} is {got}; this project serves OmniVoice with {want}")
    if info.text_vocab < info.audio_vocab:
        raise CheckpointError(f"config.json: llm_config.vocab_size {info.text_vocab} must cover the audio ids "
                              f"({info.audio_vocab})")
    return info


is_omnivoice = config_model_type(contract.FAMILY, CONFIG)


def read_checkpoint(checkpoint: Path) -> OmniVoiceInfo:
    root = Path(checkpoint)
    require_files(root, CHECKPOINT_FILES)
    return parse_config(read_json(root / CONFIG), read_json(root / CODEC_DIR / CONFIG))
