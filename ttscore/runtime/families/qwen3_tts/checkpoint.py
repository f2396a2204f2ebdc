"""Reading and validating a Qwen3-TTS 12 Hz checkpoint directory (stdlib only).

The checks run before anything heavy is loaded, so a wrong directory fails in milliseconds with a
one-line message that names the problem.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ttscore.contract.errors import CheckpointError
from ttscore.contract.qwen3_tts import VARIANTS
from ttscore.runtime.checkpoint_kit import read_json
from ttscore.runtime.weights import describe, read_weights, weight_files

REQUIRED_FILES = (
    "config.json",
    "generation_config.json",
    "preprocessor_config.json",
    "tokenizer_config.json",
    "vocab.json",
    "merges.txt",
    "speech_tokenizer/config.json",
    "speech_tokenizer/configuration.json",
    "speech_tokenizer/preprocessor_config.json",
)
# The weights (ttscore.runtime.weights): `<stem>.safetensors`, or sharded with an index.
WEIGHT_STEMS = ("model", "speech_tokenizer/model")


# Fallbacks the reference package applies when generation_config.json omits a key
# (qwen_tts/inference/qwen3_tts_model.py, _merge_generate_kwargs).
GENERATION_DEFAULTS: dict[str, Any] = {
    "do_sample": True,
    "top_k": 50,
    "top_p": 1.0,
    "temperature": 0.9,
    "repetition_penalty": 1.05,
    "subtalker_dosample": True,
    "subtalker_top_k": 50,
    "subtalker_top_p": 1.0,
    "subtalker_temperature": 0.9,
    "max_new_tokens": 2048,
}


@dataclass(frozen=True)
class TransformerDims:
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rope_theta: float
    rms_norm_eps: float


@dataclass(frozen=True)
class Qwen3TTSInfo:
    """What serving needs to know about a checkpoint, parsed from its JSON files."""

    path: Path
    variant: str  # custom_voice | voice_design | base
    model_size: str  # tts_model_size as written, e.g. "0b6", "1b7"
    talker: TransformerDims
    code_predictor: TransformerDims
    codec_vocab_size: int
    codebook_size: int  # code predictor vocab (codes 1..G-1) and code2wav codebook
    num_code_groups: int
    text_vocab_size: int
    text_hidden_size: int
    special_text_ids: dict[str, int]
    codec_ids: dict[str, int]
    languages: dict[str, int]  # lower-case name -> codec id (dialects included)
    speakers: dict[str, int]  # lower-case name -> codec id
    speaker_dialects: dict[str, str | None]
    speaker_embed_dim: int | None
    sample_rate: int
    samples_per_frame: int
    generation: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def supported_languages(self) -> list[str]:
        """Languages a request may name (reference: dialect ids are reached only via speakers)."""
        return ["auto"] + [k for k in self.languages if "dialect" not in k]

    @property
    def instruct_supported(self) -> bool:
        # The reference drops `instruct` for 0.6B CustomVoice (qwen3_tts_model.py:
        # `if self.model.tts_model_size in "0b6"`, a substring test).
        if self.variant == "custom_voice":
            return self.model_size not in "0b6"
        return True



def _dims(cfg: dict[str, Any], where: str) -> TransformerDims:
    try:
        hidden = int(cfg["hidden_size"])
        heads = int(cfg["num_attention_heads"])
        return TransformerDims(
            hidden_size=hidden,
            num_layers=int(cfg["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or hidden // heads),
            intermediate_size=int(cfg["intermediate_size"]),
            rope_theta=float(cfg.get("rope_theta", 10000.0)),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"config.json: {where} is missing or has a bad field ({exc})") from None


def _codec_id(value: Any) -> int:
    # Released configs write speaker ids as ints; some tools write one-element lists.
    if isinstance(value, list):
        if len(value) != 1:
            raise ValueError(f"speaker id list must have one element, got {value}")
        value = value[0]
    return int(value)


def read_checkpoint(path: str | Path, *, check_weights: bool = True) -> Qwen3TTSInfo:
    """Validate the directory layout and parse the configs. Raises CheckpointError."""
    root = Path(path)
    if not root.is_dir():
        raise CheckpointError(f"checkpoint directory {root} does not exist")
    for rel in REQUIRED_FILES:
        if not (root / rel).is_file():
            raise CheckpointError(f"{root} is not a Qwen3-TTS 12 Hz checkpoint: missing {rel}")
    for stem in WEIGHT_STEMS:
        if weight_files(root, stem) is None:
            raise CheckpointError(f"{root} is not a Qwen3-TTS 12 Hz checkpoint: missing {describe(stem)}")

    cfg = read_json(root / "config.json")
    st_cfg = read_json(root / "speech_tokenizer" / "config.json")
    gen_cfg = read_json(root / "generation_config.json")
    for special in ("tokenizer_config.json", "preprocessor_config.json"):
        read_json(root / special)
    try:
        vocab = json.loads((root / "vocab.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{root / 'vocab.json'} is not valid JSON: {exc}") from None
    if not isinstance(vocab, dict) or not vocab:
        raise CheckpointError("vocab.json must be a non-empty JSON object")
    info = parse_configs(cfg, st_cfg, gen_cfg, root)
    if check_weights:
        for stem in WEIGHT_STEMS:
            read_weights(root, stem)
    return info


def parse_configs(
    cfg: dict[str, Any], st_cfg: dict[str, Any], gen_cfg: dict[str, Any], root: Path
) -> Qwen3TTSInfo:
    """Parse config.json, speech_tokenizer/config.json and generation_config.json contents."""
    if cfg.get("model_type") != "qwen3_tts":
        raise CheckpointError(
            f"config.json: model_type is {cfg.get('model_type')!r}, expected 'qwen3_tts'"
        )
    tok_type = cfg.get("tokenizer_type")
    st_type = st_cfg.get("model_type")
    if tok_type == "qwen3_tts_tokenizer_25hz" or st_type == "qwen3_tts_tokenizer_25hz":
        raise CheckpointError("this is a 25 Hz Qwen3-TTS checkpoint; only the 12 Hz family is supported")
    if st_type != "qwen3_tts_tokenizer_12hz":
        raise CheckpointError(
            f"speech_tokenizer/config.json: model_type is {st_type!r}, expected 'qwen3_tts_tokenizer_12hz'"
        )
    variant = cfg.get("tts_model_type")
    if variant not in VARIANTS:
        raise CheckpointError(f"config.json: tts_model_type {variant!r} is not one of {', '.join(VARIANTS)}")

    talker_cfg = cfg.get("talker_config")
    if not isinstance(talker_cfg, dict):
        raise CheckpointError("config.json: talker_config is missing")
    cp_cfg = talker_cfg.get("code_predictor_config")
    if not isinstance(cp_cfg, dict):
        raise CheckpointError("config.json: talker_config.code_predictor_config is missing")
    talker = _dims(talker_cfg, "talker_config")
    code_predictor = _dims(cp_cfg, "talker_config.code_predictor_config")

    try:
        codec_ids = {
            "pad": int(talker_cfg["codec_pad_id"]),
            "bos": int(talker_cfg["codec_bos_id"]),
            "eos": int(talker_cfg["codec_eos_token_id"]),
            "think": int(talker_cfg["codec_think_id"]),
            "nothink": int(talker_cfg["codec_nothink_id"]),
            "think_bos": int(talker_cfg["codec_think_bos_id"]),
            "think_eos": int(talker_cfg["codec_think_eos_id"]),
        }
        special_text_ids = {
            "im_start": int(cfg.get("im_start_token_id", 151644)),
            "im_end": int(cfg.get("im_end_token_id", 151645)),
            "tts_pad": int(cfg.get("tts_pad_token_id", 151671)),
            "tts_bos": int(cfg.get("tts_bos_token_id", 151672)),
            "tts_eos": int(cfg.get("tts_eos_token_id", 151673)),
        }
        languages = {str(k).lower(): int(v) for k, v in (talker_cfg.get("codec_language_id") or {}).items()}
        speakers = {str(k).lower(): _codec_id(v) for k, v in (talker_cfg.get("spk_id") or {}).items()}
        dialects_raw = talker_cfg.get("spk_is_dialect") or {}
        speaker_dialects: dict[str, str | None] = {}
        for name in speakers:
            d = dialects_raw.get(name)
            speaker_dialects[name] = str(d).lower() if d else None
        codec_vocab = int(talker_cfg["vocab_size"])
        num_groups = int(talker_cfg.get("num_code_groups", 16))
        codebook = int(cp_cfg["vocab_size"])
        text_vocab = int(talker_cfg["text_vocab_size"])
        text_hidden = int(talker_cfg["text_hidden_size"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"config.json: talker_config has a missing or bad field ({exc})") from None

    for name, d in speaker_dialects.items():
        if d is not None and d not in languages:
            raise CheckpointError(f"config.json: speaker {name!r} names unknown dialect {d!r}")

    speaker_dim: int | None = None
    if variant == "base":
        se = cfg.get("speaker_encoder_config")
        if not isinstance(se, dict):
            raise CheckpointError("config.json: a Base checkpoint needs speaker_encoder_config")
        speaker_dim = int(se.get("enc_dim", 1024))
        if speaker_dim != talker.hidden_size:
            raise CheckpointError(
                f"config.json: speaker_encoder_config.enc_dim {speaker_dim} != talker hidden {talker.hidden_size}"
            )
        if "encoder_config" not in st_cfg:
            raise CheckpointError("speech_tokenizer/config.json: a Base checkpoint needs encoder_config")

    try:
        sample_rate = int(st_cfg.get("output_sample_rate", 24000))
        spf = int(st_cfg.get("decode_upsample_rate", 1920))
        dec = st_cfg.get("decoder_config") or {}
        if int(dec.get("num_quantizers", num_groups)) != num_groups:
            raise CheckpointError(
                f"speech tokenizer has {dec.get('num_quantizers')} quantizers, talker emits {num_groups} groups"
            )
    except (TypeError, ValueError) as exc:
        raise CheckpointError(f"speech_tokenizer/config.json: bad field ({exc})") from None

    generation = {k: gen_cfg.get(k, v) for k, v in GENERATION_DEFAULTS.items()}
    return Qwen3TTSInfo(
        path=root,
        variant=variant,
        model_size=str(cfg.get("tts_model_size", "")),
        talker=talker,
        code_predictor=code_predictor,
        codec_vocab_size=codec_vocab,
        codebook_size=codebook,
        num_code_groups=num_groups,
        text_vocab_size=text_vocab,
        text_hidden_size=text_hidden,
        special_text_ids=special_text_ids,
        codec_ids=codec_ids,
        languages=languages,
        speakers=speakers,
        speaker_dialects=speaker_dialects,
        speaker_embed_dim=speaker_dim,
        sample_rate=sample_rate,
        samples_per_frame=spf,
        generation=generation,
        config=cfg,
    )
