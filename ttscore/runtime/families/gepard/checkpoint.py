"""A Gepard-1.0 checkpoint (the released two-part layout) read into the typed facts export and
serving rely on, and the tensors its model.safetensors must hold.

The directory: `config.json` (the bare `qwen3_5_text` backbone config: all layers full attention,
`partial_rotary_factor` 1.0), `gepard_config.json` (the audio sidecar as gepard-train writes it and
vLLM-Omni's GepardConfig reads it: `audio_heads` level_audio_0..31, `audio_embed_dim`,
`special_tokens`, `text_repetition`, `codec`, `voice_cloning`), `model.safetensors` (`model.*`
backbone, `codebook_heads.{i}`, `stop_head`, `audio_embeddings.{i}`, `audio_embed_proj.{0,2}`,
`audio_embed_scale`, `null_prefix`), `tokenizer.json`, and the NanoCodec `.nemo` archive in
`nanocodec/` (a separate Hugging Face repository, export's `--codec` in the README).

Pure: the dicts come from the checkpoint (export) or the manifest (serving). `read_checkpoint` also
checks the directory and every tensor name (missing and unexpected ones refused by name).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ttscore.contract import gepard as spec
from ttscore.contract.errors import CheckpointError
from ttscore.runtime.checkpoint_kit import (
    Stack,
    compare_tensors,
    decoder_layer_shapes,
    peek_json,
    positive_int,
    read_json,
    require_files,
    stack_sizes,
)
from ttscore.runtime.weights import read_weights

CONFIG = "config.json"
SIDECAR = "gepard_config.json"
CODEC_DIR = "nanocodec"  # holds the codec's .nemo archive (nvidia/nemo-nano-codec-22khz-1.89kbps-21.5fps)
CODEC_SUFFIX = ".nemo"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
# Tensors vLLM-Omni's zero-shot talker does not load (voice cloning, training-only heads, the
# multi-token-prediction block, an untied LM head): left out of the strict check.
IGNORED_PREFIXES = ("ref_compressor.", "supcon_head.", "aligner.", "mtp.", "lm_head.")


@dataclass(frozen=True)
class Backbone(Stack):
    rope_theta: float
    vocab_size: int
    max_positions: int


@dataclass(frozen=True)
class GepardInfo:
    backbone: Backbone
    head_levels: tuple[int, ...]  # the 32 heads' cardinalities, channel order
    audio_embed_dim: int
    start_of_text: int
    end_of_text: int
    start_of_speech: int
    speaker_token_base: int  # tokeniser_length: the speaker slots' first id
    num_speaker_slots: int
    repetition_enabled: bool
    repetition_target: int
    repetition_apply_below: int
    repetition_max: int
    fsq_levels: tuple[int, ...]  # per codec group
    num_codec_groups: int
    sample_rate: int
    temperature: float
    stop_threshold: float

    @property
    def num_logits(self) -> int:
        return sum(self.head_levels)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def parse_backbone(cfg: dict[str, Any]) -> Backbone:
    """config.json (qwen3_5_text): the full-attention Qwen3.5 stack the graphs implement, or a
    CheckpointError naming what they do not."""
    if cfg.get("model_type") != "qwen3_5_text":
        raise CheckpointError(f"{CONFIG}: model_type {cfg.get('model_type')!r}, want 'qwen3_5_text'")
    layers = positive_int(cfg, "num_hidden_layers")
    types = cfg.get("layer_types") or []
    if len(types) != layers or any(t != "full_attention" for t in types):
        raise CheckpointError(f"{CONFIG}: layer_types must list {layers} full_attention layers (Gepard has no "
                              "linear-attention layers)")
    rope = dict(cfg.get("rope_parameters") or {})
    if rope.get("rope_type", "default") != "default":
        raise CheckpointError(f"{CONFIG}: rope_type {rope['rope_type']!r} is not supported")
    # The rotary fraction as transformers 5.x resolves it (the reference): rope_parameters' value, else
    # the top-level one, else Qwen3.5's default 0.25. gepard-train writes 1.0 in both places; a config
    # saved by transformers keeps the class default (0.25) at the top level beside rope_parameters' 1.0.
    factor = rope.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 0.25))
    if float(factor) != 1.0:
        raise CheckpointError(f"{CONFIG}: partial_rotary_factor {factor} is not supported (Gepard rotates the "
                              "whole head)")
    if cfg.get("attention_bias"):
        raise CheckpointError(f"{CONFIG}: attention_bias is not supported")
    if cfg.get("hidden_act", "silu") != "silu":
        raise CheckpointError(f"{CONFIG}: hidden_act {cfg['hidden_act']!r} is not supported")
    return Backbone(
        **stack_sizes(cfg), rope_theta=float(rope.get("rope_theta", cfg.get("rope_theta", 10000000.0))),
        vocab_size=positive_int(cfg, "vocab_size"), max_positions=int(cfg.get("max_position_embeddings", 32768)),
    )


def parse_config(cfg: dict[str, Any], sidecar: dict[str, Any]) -> GepardInfo:
    """The two configs as vLLM-Omni's GepardConfig reads them (its defaults where a key is absent)."""
    heads_cfg = sidecar.get("audio_heads")
    if not isinstance(heads_cfg, dict) or not heads_cfg:
        raise CheckpointError(f"{SIDECAR}: no audio_heads")
    try:
        levels = tuple(int(heads_cfg[k]) for k in sorted(heads_cfg, key=lambda s: int(str(s).rsplit("_", 1)[-1])))
    except ValueError:
        raise CheckpointError(f"{SIDECAR}: audio_heads keys must be level_audio_<n>") from None
    codec = dict(sidecar.get("codec") or {})
    fsq = tuple(int(v) for v in codec.get("fsq_levels", spec.FSQ_LEVELS))
    groups = int(codec.get("num_layers", spec.NUM_GROUPS))
    if len(levels) != spec.NUM_CODEBOOKS or levels != fsq * groups:
        raise CheckpointError(f"{SIDECAR}: audio_heads {list(levels)} must be the codec's fsq_levels {list(fsq)} "
                              f"x {groups} ({spec.NUM_CODEBOOKS} heads)")
    st = dict(sidecar.get("special_tokens") or {})
    tr = dict(sidecar.get("text_repetition") or {})
    comp = dict(dict(sidecar.get("voice_cloning") or {}).get("compressor") or {})
    backbone = parse_backbone(cfg)
    bb = sidecar.get("backbone_config")
    if isinstance(bb, dict) and bb.get("hidden_size", backbone.hidden_size) != backbone.hidden_size:
        raise CheckpointError(f"{SIDECAR}: backbone_config.hidden_size disagrees with {CONFIG}")
    slots = int(comp.get("num_queries", spec.NUM_SPEAKER_SLOTS))
    base = int(st.get("tokeniser_length", 248077))
    if base + slots > backbone.vocab_size:
        raise CheckpointError(f"{SIDECAR}: the speaker slots {base}..{base + slots - 1} are past the vocabulary "
                              f"({backbone.vocab_size})")
    return GepardInfo(
        backbone=backbone, head_levels=levels, audio_embed_dim=int(sidecar.get("audio_embed_dim", 32)),
        start_of_text=int(st.get("start_of_text", 248073)), end_of_text=int(st.get("end_of_text", 248074)),
        start_of_speech=int(st.get("start_of_speech", 248070)), speaker_token_base=base, num_speaker_slots=slots,
        repetition_enabled=bool(tr.get("enabled", True)), repetition_target=int(tr.get("target_text_tokens", 16)),
        repetition_apply_below=int(tr.get("apply_below", 13)), repetition_max=int(tr.get("max_repeats", 8)),
        fsq_levels=fsq, num_codec_groups=groups, sample_rate=int(codec.get("sample_rate", spec.SAMPLE_RATE)),
        temperature=float(sidecar.get("temperature", spec.TEMPERATURE)),
        stop_threshold=float(sidecar.get("stop_threshold", spec.STOP_THRESHOLD)),
    )


def tensor_shapes(info: GepardInfo) -> dict[str, tuple[int, ...]]:
    """Every tensor the zero-shot model consumes, by its released name."""
    b = info.backbone
    h = b.hidden_size
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (b.vocab_size, h)}
    for i in range(b.num_layers):
        decoder_layer_shapes(out, f"model.layers.{i}.", b, qk_norm=True, gated_query=True)
    out["model.norm.weight"] = (h,)
    for i, levels in enumerate(info.head_levels):
        out[f"codebook_heads.{i}.weight"] = (levels, h)
        out[f"codebook_heads.{i}.bias"] = (levels,)
    out["stop_head.weight"] = (1, h)
    out["stop_head.bias"] = (1,)
    for i, levels in enumerate(info.head_levels):
        out[f"audio_embeddings.{i}.weight"] = (levels, info.audio_embed_dim)
    out["audio_embed_proj.0.weight"] = (h, len(info.head_levels) * info.audio_embed_dim)
    out["audio_embed_proj.0.bias"] = (h,)
    out["audio_embed_proj.2.weight"] = (h, h)
    out["audio_embed_proj.2.bias"] = (h,)
    out["audio_embed_scale"] = ()  # a scalar buffer ([1] also accepted)
    out["null_prefix"] = (info.num_speaker_slots, h)
    return out


def read_configs(checkpoint: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    return read_json(Path(checkpoint) / CONFIG), read_json(Path(checkpoint) / SIDECAR)


def is_gepard(checkpoint: Path) -> bool:
    """A qwen3_5_text config.json beside a gepard_config.json (the export dispatch)."""
    root = Path(checkpoint)
    cfg = peek_json(root / CONFIG)
    return (root / SIDECAR).is_file() and cfg is not None and cfg.get("model_type") == "qwen3_5_text"


def check_tensors(checkpoint: Path, info: GepardInfo) -> dict[str, tuple[int, ...]]:
    """The stored tensors against tensor_shapes: CheckpointError naming missing, unexpected and
    misshapen ones. Returns the expected shapes."""
    expected = tensor_shapes(info)
    compare_tensors(f"{checkpoint}/model.safetensors is not a Gepard-1.0 checkpoint of its configs",
            read_weights(checkpoint, "model").shapes(), expected, ignore=lambda n: n.startswith(IGNORED_PREFIXES),
            fits=lambda n, got, want: got == want or (n == "audio_embed_scale" and got == (1,)))
    return expected


def codec_archive(checkpoint: Path, codec: Path | None = None) -> Path:
    """The NanoCodec `.nemo` archive: `codec` (a .nemo file or a folder holding one) or the
    checkpoint's `nanocodec/` folder."""
    where = Path(codec) if codec is not None else Path(checkpoint) / CODEC_DIR
    if where.is_file():
        return where
    found = sorted(where.glob(f"*{CODEC_SUFFIX}")) if where.is_dir() else []
    if len(found) != 1:
        raise CheckpointError(f"{where}: want exactly one NanoCodec {CODEC_SUFFIX} archive "
                              f"(nvidia/nemo-nano-codec-22khz-1.89kbps-21.5fps), found {len(found)}")
    return found[0]


def read_checkpoint(checkpoint: Path, codec: Path | None = None) -> GepardInfo:
    root = Path(checkpoint)
    require_files(root, (CONFIG, SIDECAR, "tokenizer.json"))
    info = parse_config(*read_configs(root))
    check_tensors(root, info)
    codec_archive(root, codec)
    return info
