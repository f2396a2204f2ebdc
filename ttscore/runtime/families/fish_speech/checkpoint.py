"""A Fish Speech S2 Pro checkpoint (fishaudio/s2-pro's layout) read into typed facts, and the tensors its
files must hold.

The directory: `config.json` (model_type `fish_qwen3_omni`, in Fish field names: `text_config` for the
Slow AR and `audio_decoder_config` for the Fast AR, each `dim, n_head, n_local_heads, head_dim, n_layer,
intermediate_size, attention_qk_norm, rope_base, ...`, plus `semantic_start_token_id`,
`semantic_end_token_id`, `audio_pad_token_id`; a key left out takes vLLM-Omni's FishSpeechConfig default),
`model.safetensors` (`text_model.model.*` and `audio_decoder.*`, the names vLLM-Omni's
`_remap_fish_speech_weights` reads), `tokenizer.json` (+ `tokenizer_config.json`) and `codec.pth` (a
torch state dict of the modded DAC, optionally under `generator`).

No codec config ships with the checkpoint (vLLM-Omni's `build_dac_codec` hard-codes the real topology);
here the codec's dimensions are read from its tensor shapes (`codec_dims`), which is how a small codec
loads, and the tensors are then checked against the full list those dimensions imply (`codec_shapes`).
The DAC's attention layers have head_dim 64 (modded_dac_vq.yaml), so their width is a multiple of 64.
Missing, unexpected or misshapen tensors are refused with their names.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ttscore.contract import fish_speech as spec
from ttscore.contract.errors import CheckpointError
from ttscore.runtime.checkpoint_kit import (
    Shapes,
    compare_tensors,
    config_model_type,
    linear_shapes,
    load_torch_state,
    read_json,
    require_files,
    weight_norm_shapes,
)
from ttscore.runtime.weights import read_weights

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
TOKENIZER = "tokenizer.json"
CODEC = "codec.pth"
DAC_HEAD_DIM = 64  # modded_dac_vq.yaml: every DAC transformer's head_dim
# Persistent buffers of the DAC's transformers (vLLM-Omni registers them; upstream 2.0 does not): tolerated.
CODEC_BUFFERS = ("freqs_cis", "causal_mask")


@dataclass(frozen=True)
class Transformer:
    """A Fish transformer stack (Slow or Fast AR)."""

    dim: int
    n_head: int
    n_local_heads: int
    head_dim: int
    n_layer: int
    intermediate_size: int
    qk_norm: bool
    rope_base: float
    norm_eps: float
    vocab_size: int


@dataclass(frozen=True)
class FishConfig:
    slow: Transformer
    fast: Transformer
    codebook_size: int  # semantic codebook (4096)
    num_codebooks: int  # 10
    semantic_start: int
    semantic_end: int
    audio_pad: int
    max_seq_len: int

    @property
    def project_in(self) -> bool:
        """Whether the Fast AR has `fast_project_in` (its width differs from the Slow AR's)."""
        return self.fast.dim != self.slow.dim


@dataclass(frozen=True)
class CodecDims:
    encoder_dim: int
    encoder_rates: tuple[int, ...]
    encoder_layers: tuple[int, ...]  # transformer layers after each encoder block
    encoder_ffn: int  # the encoder transformers' intermediate size (0 without one)
    latent_dim: int
    codebook_dim: int
    semantic_codebook_size: int
    n_residual: int
    residual_codebook_size: int
    downsample: tuple[int, ...]
    quantizer_layers: tuple[int, int]  # pre_module, post_module
    quantizer_ffn: int
    decoder_dim: int
    decoder_rates: tuple[int, ...]

    @property
    def samples_per_frame(self) -> int:
        return math.prod(self.encoder_rates) * math.prod(self.downsample)


@dataclass(frozen=True)
class FishInfo:
    config: FishConfig
    codec: CodecDims


def _transformer(cfg: dict[str, Any], defaults: dict[str, Any]) -> Transformer:
    c = {**defaults, **cfg}
    return Transformer(
        dim=int(c["dim"]), n_head=int(c["n_head"]), n_local_heads=int(c["n_local_heads"]),
        head_dim=int(c["head_dim"]), n_layer=int(c["n_layer"]), intermediate_size=int(c["intermediate_size"]),
        qk_norm=bool(c["attention_qk_norm"]), rope_base=float(c["rope_base"]), norm_eps=float(c["rms_norm_eps"]),
        vocab_size=int(c["vocab_size"]))


# vLLM-Omni FishSpeechSlowARConfig / FishSpeechFastARConfig defaults (s2-pro's values).
SLOW_DEFAULTS: dict[str, Any] = dict(vocab_size=155776, dim=2560, n_head=32, n_local_heads=8, head_dim=128, n_layer=36,
                                     intermediate_size=9728, attention_qk_norm=True, rope_base=1_000_000.0,
                                     rms_norm_eps=1e-6, max_seq_len=32768, tie_word_embeddings=True,
                                     codebook_size=4096, num_codebooks=10)
FAST_DEFAULTS: dict[str, Any] = dict(vocab_size=4096, num_codebooks=10, dim=2560, n_head=32, n_local_heads=8,
                                     head_dim=128, n_layer=4, intermediate_size=9728, attention_qk_norm=False,
                                     rope_base=1_000_000.0, rms_norm_eps=1e-6)


is_fish_speech = config_model_type(spec.MODEL_TYPE, CONFIG)


def parse_config(cfg: dict[str, Any]) -> FishConfig:
    """config.json's facts; CheckpointError for settings vLLM-Omni's Fish Speech does not run."""
    if cfg.get("model_type") != spec.MODEL_TYPE:
        raise CheckpointError(f"{CONFIG}: model_type {cfg.get('model_type')!r} is not {spec.MODEL_TYPE!r}")
    text = cfg.get("text_config") or {}
    audio = cfg.get("audio_decoder_config") or {}
    if not isinstance(text, dict) or not isinstance(audio, dict):
        raise CheckpointError(f"{CONFIG}: text_config and audio_decoder_config must be objects")
    if text.get("rope_scaling"):
        raise CheckpointError(f"{CONFIG}: text_config.rope_scaling is not supported (plain interleaved RoPE only)")
    if not {**SLOW_DEFAULTS, **text}["tie_word_embeddings"]:
        raise CheckpointError(f"{CONFIG}: tie_word_embeddings false is not supported (vLLM-Omni's Slow AR reads "
                              "its logits from the tied embedding)")
    slow = _transformer(text, SLOW_DEFAULTS)
    fast = _transformer(audio, FAST_DEFAULTS)
    codebook_size = int(text.get("codebook_size", SLOW_DEFAULTS["codebook_size"]))
    num_codebooks = int(text.get("num_codebooks", SLOW_DEFAULTS["num_codebooks"]))
    start = int(cfg.get("semantic_start_token_id", 151678))
    end = int(cfg.get("semantic_end_token_id", 155773))
    out = FishConfig(slow=slow, fast=fast, codebook_size=codebook_size, num_codebooks=num_codebooks,
                     semantic_start=start, semantic_end=end, audio_pad=int(cfg.get("audio_pad_token_id", 151677)),
                     max_seq_len=int(text.get("max_seq_len", SLOW_DEFAULTS["max_seq_len"])))
    if end - start + 1 != codebook_size:
        raise CheckpointError(f"{CONFIG}: semantic ids {start}..{end} are not text_config.codebook_size "
                              f"{codebook_size} ids")
    if end >= slow.vocab_size or slow.vocab_size <= spec.IM_END_ID:
        raise CheckpointError(f"{CONFIG}: text_config.vocab_size {slow.vocab_size} does not hold the semantic ids "
                              f"and <|im_end|> ({spec.IM_END_ID})")
    if fast.vocab_size < codebook_size or num_codebooks != int(audio.get("num_codebooks", num_codebooks)):
        raise CheckpointError(f"{CONFIG}: audio_decoder_config does not match text_config's codebooks")
    if fast.vocab_size < spec.RESIDUAL_CODEBOOK_SIZE:
        raise CheckpointError(f"{CONFIG}: audio_decoder_config.vocab_size below {spec.RESIDUAL_CODEBOOK_SIZE}")
    return out


def _layers(out: Shapes, prefix: str, t: Transformer) -> None:
    qkv = (t.n_head + 2 * t.n_local_heads) * t.head_dim
    for i in range(t.n_layer):
        p = f"{prefix}.layers.{i}"
        linear_shapes(out, f"{p}.attention.wqkv", qkv, t.dim)
        linear_shapes(out, f"{p}.attention.wo", t.dim, t.n_head * t.head_dim)
        if t.qk_norm:
            out[f"{p}.attention.q_norm.weight"] = (t.head_dim,)
            out[f"{p}.attention.k_norm.weight"] = (t.head_dim,)
        out[f"{p}.attention_norm.weight"] = (t.dim,)
        out[f"{p}.ffn_norm.weight"] = (t.dim,)
        linear_shapes(out, f"{p}.feed_forward.w1", t.intermediate_size, t.dim)
        linear_shapes(out, f"{p}.feed_forward.w2", t.dim, t.intermediate_size)
        linear_shapes(out, f"{p}.feed_forward.w3", t.intermediate_size, t.dim)


def tensor_shapes(cfg: FishConfig) -> Shapes:
    """Every tensor model.safetensors holds, with its shape."""
    out: Shapes = {}
    s, f = cfg.slow, cfg.fast
    out["text_model.model.embeddings.weight"] = (s.vocab_size, s.dim)
    _layers(out, "text_model.model", s)
    out["text_model.model.norm.weight"] = (s.dim,)
    out["audio_decoder.codebook_embeddings.weight"] = (cfg.codebook_size * cfg.num_codebooks, s.dim)
    out["audio_decoder.embeddings.weight"] = (f.vocab_size, f.dim)
    out["audio_decoder.output.weight"] = (f.vocab_size, f.dim)
    out["audio_decoder.norm.weight"] = (f.dim,)
    if cfg.project_in:
        linear_shapes(out, "audio_decoder.fast_project_in", f.dim, s.dim, bias=True)
    _layers(out, "audio_decoder", f)
    return out


# --- the codec -----------------------------------------------------------------------------------


def _conv(out: Shapes, name: str, cin: int, cout: int, k: int, transposed: bool = False) -> None:
    """A weight-normed (parametrizations) conv with bias; ConvTranspose1d weights are [in, out, k]."""
    out[f"{name}.conv.bias"] = (cout,)
    weight_norm_shapes(out, f"{name}.conv", (cin, cout, k) if transposed else (cout, cin, k), bias=False)


def _residual_unit(out: Shapes, name: str, dim: int) -> None:
    out[f"{name}.block.0.alpha"] = (1, dim, 1)
    _conv(out, f"{name}.block.1", dim, dim, 7)
    out[f"{name}.block.2.alpha"] = (1, dim, 1)
    _conv(out, f"{name}.block.3", dim, dim, 1)


def _dac_transformer(out: Shapes, name: str, dim: int, layers: int, ffn: int) -> None:
    for i in range(layers):
        p = f"{name}.layers.{i}"
        linear_shapes(out, f"{p}.attention.wqkv", 3 * dim, dim)
        linear_shapes(out, f"{p}.attention.wo", dim, dim)
        linear_shapes(out, f"{p}.feed_forward.w1", ffn, dim)
        linear_shapes(out, f"{p}.feed_forward.w3", ffn, dim)
        linear_shapes(out, f"{p}.feed_forward.w2", dim, ffn)
        out[f"{p}.ffn_norm.weight"] = (dim,)
        out[f"{p}.attention_norm.weight"] = (dim,)
        out[f"{p}.attention_layer_scale.gamma"] = (dim,)
        out[f"{p}.ffn_layer_scale.gamma"] = (dim,)
    out[f"{name}.norm.weight"] = (dim,)


def _quantizer(out: Shapes, name: str, dim: int, cdim: int, size: int) -> None:
    for proj, (o, i) in (("in_proj", (cdim, dim)), ("out_proj", (dim, cdim))):
        out[f"{name}.{proj}.bias"] = (o,)
        out[f"{name}.{proj}.weight_g"] = (o, 1, 1)
        out[f"{name}.{proj}.weight_v"] = (o, i, 1)
    out[f"{name}.codebook.weight"] = (size, cdim)


def _convnext(out: Shapes, name: str, dim: int) -> None:
    out[f"{name}.gamma"] = (dim,)
    out[f"{name}.dwconv.conv.weight"] = (dim, 1, 7)
    out[f"{name}.dwconv.conv.bias"] = (dim,)
    out[f"{name}.norm.weight"] = (dim,)
    out[f"{name}.norm.bias"] = (dim,)
    linear_shapes(out, f"{name}.pwconv1", 4 * dim, dim, bias=True)
    linear_shapes(out, f"{name}.pwconv2", dim, 4 * dim, bias=True)


def codec_shapes(d: CodecDims) -> Shapes:
    """Every tensor of the DAC state dict (its transformers' buffers aside), as vLLM-Omni's dac_modules
    name them for these dimensions."""
    out: Shapes = {}
    _conv(out, "encoder.block.0", 1, d.encoder_dim, 7)
    dim = d.encoder_dim
    for i, (stride, layers) in enumerate(zip(d.encoder_rates, d.encoder_layers, strict=True)):
        dim *= 2
        p = f"encoder.block.{i + 1}.block"
        for j in range(3):
            _residual_unit(out, f"{p}.{j}", dim // 2)
        out[f"{p}.3.alpha"] = (1, dim // 2, 1)
        _conv(out, f"{p}.4", dim // 2, dim, 2 * stride)
        if layers:
            _dac_transformer(out, f"{p}.5", dim, layers, d.encoder_ffn)
    n = len(d.encoder_rates)
    out[f"encoder.block.{n + 1}.alpha"] = (1, dim, 1)
    _conv(out, f"encoder.block.{n + 2}", dim, d.latent_dim, 3)
    q, L = "quantizer", d.latent_dim
    _quantizer(out, f"{q}.semantic_quantizer.quantizers.0", L, d.codebook_dim, d.semantic_codebook_size)
    for i in range(d.n_residual):
        _quantizer(out, f"{q}.quantizer.quantizers.{i}", L, d.codebook_dim, d.residual_codebook_size)
    for i, factor in enumerate(d.downsample):
        out[f"{q}.downsample.{i}.0.conv.weight"] = (L, L, factor)
        out[f"{q}.downsample.{i}.0.conv.bias"] = (L,)
        _convnext(out, f"{q}.downsample.{i}.1", L)
    for j, factor in enumerate(reversed(d.downsample)):
        out[f"{q}.upsample.{j}.0.conv.weight"] = (L, L, factor)
        out[f"{q}.upsample.{j}.0.conv.bias"] = (L,)
        _convnext(out, f"{q}.upsample.{j}.1", L)
    _dac_transformer(out, f"{q}.pre_module", L, d.quantizer_layers[0], d.quantizer_ffn)
    _dac_transformer(out, f"{q}.post_module", L, d.quantizer_layers[1], d.quantizer_ffn)
    _conv(out, "decoder.model.0", L, d.decoder_dim, 7)
    for i, stride in enumerate(d.decoder_rates):
        cin, cout = d.decoder_dim // 2**i, d.decoder_dim // 2 ** (i + 1)
        p = f"decoder.model.{i + 1}.block"
        out[f"{p}.0.alpha"] = (1, cin, 1)
        _conv(out, f"{p}.1", cin, cout, 2 * stride, transposed=True)
        for j in range(3):
            _residual_unit(out, f"{p}.{j + 2}", cout)
    m = len(d.decoder_rates)
    cout = d.decoder_dim // 2**m
    out[f"decoder.model.{m + 1}.alpha"] = (1, cout, 1)
    _conv(out, f"decoder.model.{m + 2}", cout, 1, 7)
    return out


def _need(shapes: Shapes, name: str) -> tuple[int, ...]:
    if name not in shapes:
        raise CheckpointError(f"{CODEC}: missing {name} (the codec's dimensions are read from it)")
    return shapes[name]


def _count(shapes: Shapes, pattern: str) -> int:
    rx = re.compile(pattern)
    return len({m.group(1) for k in shapes if (m := rx.fullmatch(k))})


def codec_dims(shapes: Shapes) -> CodecDims:
    """The DAC's dimensions, read from its tensor shapes."""
    w = ".conv.parametrizations.weight.original1"
    enc_dim = _need(shapes, f"encoder.block.0{w}")[0]
    n_enc = _count(shapes, r"encoder\.block\.(\d+)\.block\.4" + re.escape(w))
    rates, layers, ffn = [], [], 0
    for b in range(1, n_enc + 1):
        rates.append(_need(shapes, f"encoder.block.{b}.block.4{w}")[2] // 2)
        n = _count(shapes, rf"encoder\.block\.{b}\.block\.5\.layers\.(\d+)\.attention\.wqkv\.weight")
        layers.append(n)
        if n:
            ffn = _need(shapes, f"encoder.block.{b}.block.5.layers.0.feed_forward.w1.weight")[0]
    latent = _need(shapes, f"encoder.block.{n_enc + 2}{w}")[0]
    sem = _need(shapes, "quantizer.semantic_quantizer.quantizers.0.codebook.weight")
    n_res = _count(shapes, r"quantizer\.quantizer\.quantizers\.(\d+)\.codebook\.weight")
    res = _need(shapes, "quantizer.quantizer.quantizers.0.codebook.weight")
    n_down = _count(shapes, r"quantizer\.downsample\.(\d+)\.0\.conv\.weight")
    down = tuple(_need(shapes, f"quantizer.downsample.{i}.0.conv.weight")[2] for i in range(n_down))
    qlayers = tuple(_count(shapes, rf"quantizer\.{m}\.layers\.(\d+)\.attention\.wqkv\.weight")
                    for m in ("pre_module", "post_module"))
    qffn = _need(shapes, "quantizer.post_module.layers.0.feed_forward.w1.weight")[0] if qlayers[1] else 0
    dec_dim = _need(shapes, f"decoder.model.0{w}")[0]
    n_dec = _count(shapes, r"decoder\.model\.(\d+)\.block\.1" + re.escape(w))
    dec_rates = tuple(_need(shapes, f"decoder.model.{b}.block.1{w}")[2] // 2 for b in range(1, n_dec + 1))
    d = CodecDims(encoder_dim=enc_dim, encoder_rates=tuple(rates), encoder_layers=tuple(layers), encoder_ffn=ffn,
                  latent_dim=latent, codebook_dim=sem[1], semantic_codebook_size=sem[0], n_residual=n_res,
                  residual_codebook_size=res[0], downsample=down, quantizer_layers=(qlayers[0], qlayers[1]),
                  quantizer_ffn=qffn, decoder_dim=dec_dim, decoder_rates=dec_rates)
    widths = [latent] + [enc_dim * 2 ** (i + 1) for i, n in enumerate(layers) if n]
    if any(x % DAC_HEAD_DIM for x in widths):
        raise CheckpointError(f"{CODEC}: the DAC's transformer widths {widths} are not multiples of its head_dim "
                              f"{DAC_HEAD_DIM}")
    if any(n and ffn != 3 * enc_dim * 2 ** (i + 1) for i, n in enumerate(layers)):
        raise CheckpointError(f"{CODEC}: encoder transformer intermediate size {ffn} is not 3x its width "
                              "(modded DAC's EncoderBlock)")
    if d.decoder_dim % 2 ** len(dec_rates):
        raise CheckpointError(f"{CODEC}: decoder width {d.decoder_dim} does not halve {len(dec_rates)} times")
    if math.prod(dec_rates) != math.prod(d.encoder_rates):
        raise CheckpointError(f"{CODEC}: decoder rates {dec_rates} do not invert encoder rates {d.encoder_rates}")
    return d


def read_codec(checkpoint: Path) -> tuple[dict[str, Any], CodecDims]:
    """codec.pth's tensors (the state dict, or the one under `generator`) and the dimensions their shapes give."""
    state = load_torch_state(Path(checkpoint) / CODEC)
    generator = state.get("generator")
    state = generator if isinstance(generator, dict) else state
    return state, codec_dims({k: tuple(v.shape) for k, v in state.items()})


def _compare(what: Path, stored: Shapes, expected: Shapes, tolerated: tuple[str, ...] = ()) -> None:
    compare_tensors(f"{what} is not a {spec.DISPLAY} checkpoint of its config", stored, expected,
            ignore=lambda n: bool(tolerated) and n.endswith(tolerated))


def check_codec(checkpoint: Path, cfg: FishConfig) -> CodecDims:
    state, dims = read_codec(checkpoint)
    stored = {k: tuple(v.shape) for k, v in state.items()}
    _compare(Path(checkpoint) / CODEC, stored, codec_shapes(dims), CODEC_BUFFERS)
    if dims.semantic_codebook_size != cfg.codebook_size or dims.n_residual + 1 != cfg.num_codebooks:
        raise CheckpointError(f"{CODEC}: codebooks ({dims.semantic_codebook_size} semantic + {dims.n_residual} "
                              f"residual) do not match config.json ({cfg.codebook_size}, {cfg.num_codebooks} in all)")
    if dims.residual_codebook_size != spec.RESIDUAL_CODEBOOK_SIZE:
        raise CheckpointError(f"{CODEC}: residual codebooks of {dims.residual_codebook_size} codes; vLLM-Omni's "
                              f"Fast AR samples {spec.RESIDUAL_CODEBOOK_SIZE}")
    return dims


def check_tensors(checkpoint: Path, cfg: FishConfig) -> Shapes:
    expected = tensor_shapes(cfg)
    _compare(Path(checkpoint) / WEIGHTS, read_weights(checkpoint, "model").shapes(), expected)
    return expected


def read_config(checkpoint: Path) -> FishConfig:
    return parse_config(read_json(Path(checkpoint) / CONFIG))


def read_checkpoint(checkpoint: Path) -> FishInfo:
    """Check the directory: config, both tensor files against it, the tokenizer's special tokens."""
    root = Path(checkpoint)
    require_files(root, (CONFIG, WEIGHTS, TOKENIZER, CODEC))
    cfg = read_config(root)
    check_tensors(root, cfg)
    dims = check_codec(root, cfg)
    check_tokenizer(root, cfg)
    return FishInfo(config=cfg, codec=dims)


def special_ids(checkpoint: Path) -> dict[str, int]:
    """tokenizer.json's added tokens: content -> id."""
    tok = read_json(Path(checkpoint) / TOKENIZER)
    return {str(t["content"]): int(t["id"]) for t in tok.get("added_tokens", [])}


def check_tokenizer(checkpoint: Path, cfg: FishConfig) -> None:
    """The special tokens the prompt and the Slow AR's mask use, at the ids config.json and vLLM-Omni expect."""
    ids = special_ids(checkpoint)
    want = {spec.IM_END: spec.IM_END_ID, "<|semantic:0|>": cfg.semantic_start,
            f"<|semantic:{cfg.codebook_size - 1}|>": cfg.semantic_end}
    for token in (spec.IM_START, spec.VOICE, spec.AUDIO_START, spec.AUDIO_END):
        if token not in ids:
            raise CheckpointError(f"{checkpoint}/{TOKENIZER}: no special token {token}")
    for token, i in want.items():
        if ids.get(token) != i:
            raise CheckpointError(f"{checkpoint}/{TOKENIZER}: {token} is id {ids.get(token)}, expected {i}")
