"""A Breeze-TTS-2 checkpoint's config.json (vLLM-Omni's BreezeTTS2Config layout), read into the typed
facts export and serving rely on, and the tensors its model.safetensors must hold.

Pure: the dict comes from the checkpoint (export) or the manifest (serving). `read_checkpoint` also
checks the directory: config, tokenizer, `audio_tokenizer/` and every tensor name (missing and
unexpected ones are refused by name).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ttscore.contract import breeze_tts_2 as spec
from ttscore.contract.errors import CheckpointError
from ttscore.runtime.checkpoint_kit import (
    Stack,
    decoder_layer_shapes,
    name_problems,
    peek_json,
    positive_int,
    read_json,
    require_files,
    stack_sizes,
)
from ttscore.runtime.weights import read_weights

CHECKPOINT_FILES = ("config.json", "tokenizer.json", f"{spec.AUDIO_TOKENIZER_DIR}/config.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
# The flat audio table is tied (tie_codebooks_embeddings): a checkpoint serializes one of these names.
AUDIO_TABLE = "depth_decoder.model.embed_tokens.weight"
AUDIO_TABLE_ALIAS = "backbone_model.embed_tokens.embed_audio_tokens.weight"
# Tensors the released loader skips (vLLM-Omni's talker ignores them): kept out of the check.
IGNORED_PREFIXES = ("codec_model.", "backbone_model.embed_tokens.")
OPTIONAL = ("embed_text_tokens.weight",)


@dataclass(frozen=True)
class TextEncoder:
    stack: Stack
    vocab_size: int
    sliding_window: int
    layer_types: tuple[str, ...]
    query_pre_attn_scalar: float
    eoi_token_index: int
    rope: dict[str, dict[str, Any]]  # per layer type: rope_theta, rope_type, factor


@dataclass(frozen=True)
class BreezeInfo:
    text: TextEncoder
    backbone: Stack
    backbone_rope_theta: float
    depth: Stack
    depth_rope: dict[str, Any]  # rope_theta + llama3 rope_scaling
    audio_embed_size: int
    num_codebooks: int
    codebook_vocab: int
    codebook_size: int
    codebook_eos: int
    audio_token_id: int
    audio_eos_token_id: int
    max_context: int
    sample_rate: int

    @property
    def eos_code(self) -> int:
        return self.codebook_vocab

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _stack(d: dict[str, Any], where: str, eps: float) -> Stack:
    return Stack(**stack_sizes(d, where, eps))


def parse_config(cfg: dict[str, Any]) -> BreezeInfo:
    for key in ("backbone_config", "text_encoder_config", "depth_decoder_config"):
        if not isinstance(cfg.get(key), dict):
            raise CheckpointError(f"config.json has no {key}: not a Breeze-TTS-2 checkpoint")
    t, b, d = cfg["text_encoder_config"], cfg["backbone_config"], cfg["depth_decoder_config"]
    nq = int(cfg.get("num_codebooks", cfg.get("audio_num_codebooks", spec.NUM_CODEBOOKS)))
    vocab = int(cfg.get("vocab_size", cfg.get("audio_vocab_size", spec.CODEBOOK_VOCAB)))
    if nq != spec.NUM_CODEBOOKS or vocab != spec.CODEBOOK_VOCAB:
        raise CheckpointError(f"config.json: {nq} codebooks x {vocab} rows; Breeze-TTS-2 has "
                              f"{spec.NUM_CODEBOOKS} x {spec.CODEBOOK_VOCAB}")
    if cfg.get("backbone_model_type", "qwen3") != "qwen3" or cfg.get("text_encoder_proj_type", "linear") != "linear":
        raise CheckpointError("config.json: only backbone_model_type qwen3 with a linear text_encoder_proj is supported")
    codec_cfg = cfg.get("codec_config")
    codec: dict[str, Any] = codec_cfg if isinstance(codec_cfg, dict) else {}
    text_stack = _stack(t, "text_encoder_config.", 1e-6)
    layer_types = tuple(t.get("layer_types") or ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention"
                                                 for i in range(text_stack.num_layers)])
    if len(layer_types) != text_stack.num_layers or set(layer_types) - {"full_attention", "sliding_attention"}:
        raise CheckpointError("config.json: text_encoder_config.layer_types must name each layer full/sliding_attention")
    rope = t.get("rope_parameters") or {
        "full_attention": {"factor": 8.0, "rope_theta": 1e6, "rope_type": "linear"},
        "sliding_attention": {"rope_theta": 1e4, "rope_type": "default"}}
    for kind in set(layer_types):
        if rope.get(kind, {}).get("rope_type", "default") not in ("default", "linear"):
            raise CheckpointError(f"config.json: text encoder rope_type {rope[kind]['rope_type']!r} is not supported")
    # RoPE: transformers 5.x configs write `rope_parameters` (with rope_theta); older ones rope_theta
    # + rope_scaling. Either is read; a RoPE type the graphs do not implement is refused.
    depth_rope = dict(d.get("rope_parameters") or d.get("rope_scaling") or {})
    depth_rope.setdefault("rope_theta", float(d.get("rope_theta", 500000.0)))
    if depth_rope.get("rope_type", "default") not in ("default", "llama3"):
        raise CheckpointError(f"config.json: depth decoder rope_type {depth_rope['rope_type']!r} is not supported")
    backbone_rope = dict(b.get("rope_parameters") or b.get("rope_scaling") or {})
    if backbone_rope.get("rope_type", "default") != "default":
        raise CheckpointError(f"config.json: backbone rope_type {backbone_rope['rope_type']!r} is not supported")
    if b.get("use_sliding_window"):
        raise CheckpointError("config.json: a backbone with use_sliding_window is not supported")
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):
        if t.get(key) is not None:
            raise CheckpointError(f"config.json: text_encoder_config.{key} is not supported")
    return BreezeInfo(
        text=TextEncoder(text_stack, positive_int(t, "vocab_size", "text_encoder_config."), int(t.get("sliding_window", 512)),
                         layer_types, float(t.get("query_pre_attn_scalar", 256)), int(t.get("eoi_token_index", 256000)),
                         {k: dict(v) for k, v in rope.items()}),
        backbone=_stack(b, "backbone_config.", 1e-6),
        backbone_rope_theta=float(backbone_rope.get("rope_theta", b.get("rope_theta", 1e6))),
        depth=_stack(d, "depth_decoder_config.", 1e-5),
        depth_rope=depth_rope,
        audio_embed_size=int(d.get("audio_embed_size") or cfg.get("audio_embed_size") or b["hidden_size"]),
        num_codebooks=nq,
        codebook_vocab=vocab,
        codebook_size=int(codec.get("codebook_size", spec.CODEBOOK_SIZE)),
        codebook_eos=int(cfg.get("codebook_eos_token_id", spec.CODEBOOK_EOS_TOKEN_ID)),
        audio_token_id=int(cfg.get("audio_token_id", 262144)),
        audio_eos_token_id=int(cfg.get("audio_eos_token_id", 262145)),
        max_context=int(b.get("max_position_embeddings", cfg.get("max_position_embeddings", spec.MAX_CONTEXT))),
        sample_rate=int(cfg.get("sampling_rate", spec.SAMPLE_RATE)),
    )


def tensor_shapes(cfg: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """Every tensor the model consumes, by its released name (AUDIO_TABLE for the tied audio table)."""
    info = parse_config(cfg)
    out: dict[str, tuple[int, ...]] = {}
    t = info.text.stack
    th, td = t.hidden_size, t.head_dim
    out["text_encoder.embed_tokens.weight"] = (info.text.vocab_size, th)
    out["text_encoder.embed_tokens.eoi_embedding"] = (th,)
    for i in range(t.num_layers):
        p = f"text_encoder.layers.{i}."
        out[p + "self_attn.q_proj.weight"] = (t.num_heads * td, th)
        out[p + "self_attn.k_proj.weight"] = (t.num_kv_heads * td, th)
        out[p + "self_attn.v_proj.weight"] = (t.num_kv_heads * td, th)
        out[p + "self_attn.o_proj.weight"] = (th, t.num_heads * td)
        out[p + "self_attn.q_norm.weight"] = (td,)
        out[p + "self_attn.k_norm.weight"] = (td,)
        for n in ("pre_self_attn_layernorm", "post_self_attn_layernorm", "pre_feedforward_layernorm",
                  "post_feedforward_layernorm"):
            out[p + n + ".weight"] = (th,)
        out[p + "mlp.gate_proj.weight"] = (t.intermediate_size, th)
        out[p + "mlp.up_proj.weight"] = (t.intermediate_size, th)
        out[p + "mlp.down_proj.weight"] = (th, t.intermediate_size)
    out["text_encoder.norm.weight"] = (th,)
    bh = info.backbone.hidden_size
    out["text_encoder_proj.weight"] = (bh, th)

    def llama(prefix: str, c: Stack, qk_norm: bool) -> None:
        for i in range(c.num_layers):
            decoder_layer_shapes(out, f"{prefix}layers.{i}.", c, qk_norm=qk_norm)
        out[prefix + "norm.weight"] = (c.hidden_size,)

    llama("backbone_model.", info.backbone, True)
    out["lm_head.weight"] = (info.codebook_vocab + 1, bh)
    out["embed_text_tokens.weight"] = (int(cfg.get("text_vocab_size", info.text.vocab_size)), bh)
    e = info.audio_embed_size
    out[AUDIO_TABLE] = (info.num_codebooks * info.codebook_vocab, e)
    llama("depth_decoder.model.", info.depth, False)
    out["depth_decoder.model.inputs_embeds_projector.weight"] = (info.depth.hidden_size, e)
    if bh != e:
        out["depth_decoder.model.backbone_hidden_state_projector.weight"] = (e, bh)
    out["depth_decoder.codebooks_head.weight"] = (info.num_codebooks - 1, info.depth.hidden_size, info.codebook_vocab)
    return out


def is_breeze(checkpoint: Path) -> bool:
    """Whether the directory's config.json is a Breeze-TTS-2 config (the export dispatch)."""
    cfg = peek_json(checkpoint / "config.json")
    return (cfg is not None and cfg.get("model_type") == "breeze"
            and isinstance(cfg.get("text_encoder_config"), dict) and isinstance(cfg.get("depth_decoder_config"), dict))


def tensor_names(checkpoint: Path, cfg: dict[str, Any]) -> dict[str, str]:
    """Expected name -> the name the checkpoint stores it under; CheckpointError naming missing and
    unexpected tensors."""
    stored = set(read_weights(checkpoint, "model").tensors)
    expected = tensor_shapes(cfg)
    where = {name: name for name in expected}
    if AUDIO_TABLE not in stored and AUDIO_TABLE_ALIAS in stored:
        where[AUDIO_TABLE] = AUDIO_TABLE_ALIAS
    present = {n for n, s in where.items() if s in stored} | (stored - set(where.values()))
    parts = name_problems(present, where, optional=OPTIONAL, ignore=lambda n: n.startswith(IGNORED_PREFIXES))
    if parts:
        raise CheckpointError(f"{checkpoint}/model.safetensors is not a Breeze-TTS-2 checkpoint of its config.json: "
                              + "; ".join(parts))
    return {n: s for n, s in where.items() if s in stored}


def read_checkpoint(checkpoint: Path) -> BreezeInfo:
    require_files(checkpoint, CHECKPOINT_FILES)
    read_weights(checkpoint / spec.AUDIO_TOKENIZER_DIR, "model")
    cfg = read_json(checkpoint / "config.json")
    info = parse_config(cfg)
    tensor_names(checkpoint, cfg)
    return info
