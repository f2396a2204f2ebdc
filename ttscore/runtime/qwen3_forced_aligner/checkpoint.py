"""A Qwen3-ForcedAligner checkpoint (Qwen/Qwen3-ForcedAligner-0.6B's layout) read into the facts export and serving
rely on, and the tensors its model.safetensors must hold.

The directory, as the release ships it and qwen-asr 0.0.6 loads it (`Qwen3ASRConfig`, `Qwen3ASRProcessor`):

    config.json              model_type qwen3_asr; thinker_config {model_type qwen3_forced_aligner, classify_num,
                             audio_token_id / audio_start_token_id / audio_end_token_id, audio_config {...},
                             text_config {...}}; timestamp_token_id; timestamp_segment_time (ms per class)
    preprocessor_config.json WhisperFeatureExtractor (feature_size = num_mel_bins, 16 kHz, hop 160, n_fft 400)
    tokenizer_config.json  vocab.json  merges.txt   Qwen2's byte-level BPE with <|audio_*|> and <timestamp> added
    model.safetensors        thinker.audio_tower.*, thinker.model.*, thinker.lm_head.weight [classify_num, hidden]

Pure: `parse_config` reads the dicts (from the checkpoint at export, from the manifest at serve time).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ttscore.contract import qwen3_forced_aligner as spec
from ttscore.contract.errors import CheckpointError
from ttscore.runtime.checkpoint_kit import (
    Stack,
    compare_tensors,
    decoder_layer_shapes,
    linear_shapes,
    peek_json,
    positive_int,
    read_json,
    require_files,
    stack_sizes,
)
from ttscore.runtime.weights import read_weights

CONFIG = "config.json"
PREPROCESSOR = "preprocessor_config.json"
TOKENIZER_FILES = ("vocab.json", "merges.txt", "tokenizer_config.json")
TOWER, TEXT = "thinker.audio_tower.", "thinker.model."


@dataclass(frozen=True)
class AudioEncoder:
    num_mel_bins: int
    d_model: int
    layers: int
    heads: int
    ffn_dim: int
    output_dim: int
    n_window: int  # a chunk is 2 * n_window mel frames
    n_window_infer: int  # an attention window is n_window_infer / (2 * n_window) chunks
    downsample_hidden_size: int
    max_source_positions: int

    @property
    def chunk_frames(self) -> int:
        return 2 * self.n_window

    @property
    def conv_out_features(self) -> int:
        """The convolution stack's channels x mel bins after three stride-2 convolutions (conv_out's input)."""
        f = self.num_mel_bins
        for _ in range(3):
            f = (f + 1) // 2
        return self.downsample_hidden_size * f


@dataclass(frozen=True)
class TextStack(Stack):
    vocab_size: int
    rope_theta: float


@dataclass(frozen=True)
class AlignerInfo:
    audio: AudioEncoder
    text: TextStack
    classify_num: int
    audio_token_id: int
    audio_start_token_id: int
    audio_end_token_id: int
    timestamp_token_id: int
    timestamp_segment_time: float  # milliseconds per class

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _audio(d: dict[str, Any]) -> AudioEncoder:
    w = "thinker_config.audio_config."
    act = d.get("activation_function", "gelu")
    if act != "gelu" or d.get("scale_embedding", False):
        raise CheckpointError(f"{CONFIG}: {w}activation_function gelu without scale_embedding is what this build "
                              f"exports, got {act!r} / scale_embedding {d.get('scale_embedding')!r}")
    a = AudioEncoder(
        num_mel_bins=positive_int(d, "num_mel_bins", w), d_model=positive_int(d, "d_model", w),
        layers=positive_int(d, "encoder_layers", w), heads=positive_int(d, "encoder_attention_heads", w),
        ffn_dim=positive_int(d, "encoder_ffn_dim", w), output_dim=positive_int(d, "output_dim", w),
        n_window=positive_int(d, "n_window", w), n_window_infer=positive_int(d, "n_window_infer", w),
        downsample_hidden_size=positive_int(d, "downsample_hidden_size", w),
        max_source_positions=positive_int(d, "max_source_positions", w))
    if a.d_model % a.heads or a.n_window_infer % a.chunk_frames:
        raise CheckpointError(f"{CONFIG}: {w}d_model must divide by encoder_attention_heads and n_window_infer by "
                              f"2 * n_window")
    return a


def _text(d: dict[str, Any]) -> TextStack:
    w = "thinker_config.text_config."
    if d.get("hidden_act", "silu") != "silu" or d.get("attention_bias", False):
        raise CheckpointError(f"{CONFIG}: {w}hidden_act silu without attention_bias is what this build exports")
    rope = d.get("rope_scaling") or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        raise CheckpointError(f"{CONFIG}: {w}rope_scaling.rope_type must be default, got {rope.get('rope_type')!r}")
    return TextStack(**stack_sizes(d, w), vocab_size=positive_int(d, "vocab_size", w),
                     rope_theta=float(d.get("rope_theta", 5000000.0)))


def parse_config(cfg: dict[str, Any]) -> AlignerInfo:
    """The facts of a config.json; CheckpointError naming the field that is missing or wrong."""
    if cfg.get("model_type") != spec.MODEL_TYPE:
        raise CheckpointError(f"{CONFIG}: model_type must be {spec.MODEL_TYPE!r}, got {cfg.get('model_type')!r}")
    thinker = cfg.get("thinker_config")
    if not isinstance(thinker, dict) or thinker.get("model_type") != spec.THINKER_MODEL_TYPE:
        raise CheckpointError(f"{CONFIG}: thinker_config.model_type must be {spec.THINKER_MODEL_TYPE!r} "
                              "(a Qwen3-ASR checkpoint transcribes; it is not the forced aligner)")
    audio, text = thinker.get("audio_config"), thinker.get("text_config")
    if not isinstance(audio, dict) or not isinstance(text, dict):
        raise CheckpointError(f"{CONFIG}: thinker_config needs audio_config and text_config objects")
    seg = cfg.get("timestamp_segment_time")
    if not isinstance(seg, (int, float)) or isinstance(seg, bool) or seg <= 0:
        raise CheckpointError(f"{CONFIG}: timestamp_segment_time must be a positive number (ms), got {seg!r}")
    w = "thinker_config."
    return AlignerInfo(
        audio=_audio(audio), text=_text(text), classify_num=positive_int(thinker, "classify_num", w),
        audio_token_id=positive_int(thinker, "audio_token_id", w),
        audio_start_token_id=positive_int(thinker, "audio_start_token_id", w),
        audio_end_token_id=positive_int(thinker, "audio_end_token_id", w),
        timestamp_token_id=positive_int(cfg, "timestamp_token_id"), timestamp_segment_time=float(seg))


def tensor_shapes(info: AlignerInfo) -> dict[str, tuple[int, ...]]:
    """Every tensor the aligner consumes, by its released name."""
    a, t = info.audio, info.text
    out: dict[str, tuple[int, ...]] = {}
    ds = a.downsample_hidden_size
    out[TOWER + "conv2d1.weight"], out[TOWER + "conv2d1.bias"] = (ds, 1, 3, 3), (ds,)
    for name in ("conv2d2", "conv2d3"):
        out[f"{TOWER}{name}.weight"], out[f"{TOWER}{name}.bias"] = (ds, ds, 3, 3), (ds,)
    linear_shapes(out, TOWER + "conv_out", a.d_model, a.conv_out_features)
    for i in range(a.layers):
        p = f"{TOWER}layers.{i}."
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            linear_shapes(out, f"{p}self_attn.{proj}", a.d_model, a.d_model, bias=True)
        for norm in ("self_attn_layer_norm", "final_layer_norm"):
            out[f"{p}{norm}.weight"], out[f"{p}{norm}.bias"] = (a.d_model,), (a.d_model,)
        linear_shapes(out, p + "fc1", a.ffn_dim, a.d_model, bias=True)
        linear_shapes(out, p + "fc2", a.d_model, a.ffn_dim, bias=True)
    out[TOWER + "ln_post.weight"], out[TOWER + "ln_post.bias"] = (a.d_model,), (a.d_model,)
    linear_shapes(out, TOWER + "proj1", a.d_model, a.d_model, bias=True)
    linear_shapes(out, TOWER + "proj2", a.output_dim, a.d_model, bias=True)
    out[TEXT + "embed_tokens.weight"] = (t.vocab_size, t.hidden_size)
    for i in range(t.num_layers):
        decoder_layer_shapes(out, f"{TEXT}layers.{i}.", t, qk_norm=True)
    out[TEXT + "norm.weight"] = (t.hidden_size,)
    out["thinker.lm_head.weight"] = (info.classify_num, t.hidden_size)
    return out


def is_aligner(checkpoint: Path) -> bool:
    """A qwen3_asr config.json whose thinker is the forced aligner (the export dispatch)."""
    cfg = peek_json(Path(checkpoint) / CONFIG)
    thinker = cfg.get("thinker_config") if cfg is not None else None
    return (cfg is not None and cfg.get("model_type") == spec.MODEL_TYPE and isinstance(thinker, dict)
            and thinker.get("model_type") == spec.THINKER_MODEL_TYPE)


def read_checkpoint(checkpoint: Path) -> AlignerInfo:
    """The checkpoint's facts, its files and every tensor's name and shape checked (CheckpointError)."""
    root = Path(checkpoint)
    require_files(root, (CONFIG, PREPROCESSOR, *TOKENIZER_FILES))
    info = parse_config(read_json(root / CONFIG))
    pre = read_json(root / PREPROCESSOR)
    if pre.get("feature_size") != info.audio.num_mel_bins or pre.get("sampling_rate", spec.SAMPLE_RATE) != \
            spec.SAMPLE_RATE or pre.get("hop_length", spec.HOP_LENGTH) != spec.HOP_LENGTH or \
            pre.get("n_fft", spec.N_FFT) != spec.N_FFT:
        raise CheckpointError(f"{root}/{PREPROCESSOR}: want Whisper's front end with feature_size "
                              f"{info.audio.num_mel_bins} at {spec.SAMPLE_RATE} Hz, hop {spec.HOP_LENGTH}, "
                              f"n_fft {spec.N_FFT}")
    compare_tensors(f"{root}/model.safetensors is not a {spec.DISPLAY} checkpoint of its config",
                    read_weights(root, "model").shapes(), tensor_shapes(info))
    return info
