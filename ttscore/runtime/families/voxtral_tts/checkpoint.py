"""A Voxtral TTS checkpoint (Mistral's layout) read into typed facts, and the tensors
`consolidated.safetensors` must hold.

The directory: `params.json` (Mistral's config: the language model's keys at the top level,
`multimodal.audio_model_args` for the audio heads and flow matching, `multimodal.audio_tokenizer_args`
for the codec and its `voice` name -> index map), `consolidated.safetensors` (Mistral's tensor names:
`layers.N.attention.wq` ... with q/k in Mistral's interleaved rotary layout, `norm`,
`mm_audio_embeddings.{tok_embeddings,audio_codebook_embeddings.embeddings}`, `acoustic_transformer.*`,
`audio_tokenizer.{decoder_blocks,output_proj,quantizer}.*`), `tekken.json` (the tokenizer, with an
`audio` section naming each voice's number of prompt frames) and `voice_embedding/<voice>.pt` (the
prompt rows of each preset voice, [frames, dim]).

The codec's encoder (`audio_tokenizer.input_proj.*`, `audio_tokenizer.encoder_blocks.*`) is absent from
the public checkpoint and never used here (no cloning): tolerated when present. Every other tensor is
checked by name and shape; rotary or scaling settings this implementation does not compute are refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ttscore.contract import voxtral_tts as spec
from ttscore.contract.errors import CheckpointError
from ttscore.runtime.checkpoint_kit import compare_tensors, peek_json, read_json, require_files
from ttscore.runtime.weights import read_weights

PARAMS = "params.json"
WEIGHTS_STEM = "consolidated"
WEIGHTS = f"{WEIGHTS_STEM}.safetensors"
TEKKEN = "tekken.json"
VOICES_DIR = "voice_embedding"
ENCODER_PREFIXES = ("audio_tokenizer.input_proj.", "audio_tokenizer.encoder_blocks.")
# params.json keys that change the language model's positions or attention; none is implemented.
UNSUPPORTED_LM_KEYS = ("rope_scaling", "yarn", "llama_4_scaling", "sliding_window", "moe", "lora")
PAD = 128  # vLLM-Omni pads the audio codebook tables to a multiple of 128 rows


def _pad(n: int) -> int:
    return PAD * ((n + PAD - 1) // PAD)


@dataclass(frozen=True)
class LanguageModel:
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    hidden_dim: int
    vocab_size: int
    norm_eps: float
    rope_theta: float
    tied_embeddings: bool


@dataclass(frozen=True)
class FlowMatching:
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    hidden_dim: int
    use_biases: bool
    norm_eps: float
    n_decoding_steps: int
    steps_given: bool  # whether params.json names n_decoding_steps (else vLLM-Omni's default)


@dataclass(frozen=True)
class Codec:
    sampling_rate: int
    patch_size: int
    patch_kernel: int
    semantic_dim: int
    acoustic_dim: int
    dim: int
    hidden_dim: int
    head_dim: int
    n_heads: int
    n_kv_heads: int
    window: int
    norm_eps: float
    qk_norm_eps: float
    use_biases: bool
    layer_scale: bool
    transformer_lengths: tuple[int, ...]
    kernels: tuple[int, ...]
    strides: tuple[int, ...]
    encoder_strides: tuple[int, ...]

    @property
    def samples_per_frame(self) -> int:
        return self.patch_size * math.prod(self.strides)


@dataclass(frozen=True)
class VoxtralInfo:
    lm: LanguageModel
    fm: FlowMatching
    codec: Codec
    semantic_codebook_size: int
    acoustic_codebook_size: int  # quantisation levels per acoustic dimension
    n_acoustic_codebook: int
    audio_token_id: int
    begin_audio_token_id: int
    voices: dict[str, int]  # the codec args' `voice` map (name -> index)

    @property
    def codebook_sizes(self) -> list[int]:
        """Each codebook's table size in the summed input embedding (special ids included)."""
        extra = spec.NUM_AUDIO_SPECIAL
        return [self.semantic_codebook_size + extra] + [self.acoustic_codebook_size + extra] * self.n_acoustic_codebook

    @property
    def semantic_logits(self) -> int:
        return _pad(self.semantic_codebook_size + spec.NUM_AUDIO_SPECIAL)

    @property
    def audio_embedding_rows(self) -> int:
        return _pad(sum(self.codebook_sizes))


def _get(d: dict[str, Any], key: str, where: str) -> Any:
    if key not in d:
        raise CheckpointError(f"{PARAMS}: {where} has no {key!r}")
    return d[key]


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(i) for i in str(text).split(","))


def is_voxtral_tts(checkpoint: Path) -> bool:
    params = peek_json(Path(checkpoint) / PARAMS)
    return params is not None and (
        params.get("model_type") == spec.FAMILY
        or "VoxtralTTSForConditionalGeneration" in (params.get("architectures") or [])
        or bool(((params.get("multimodal") or {}).get("audio_model_args") or {}).get("acoustic_transformer_args")))


def parse_params(params: dict[str, Any]) -> VoxtralInfo:
    """params.json's facts; CheckpointError for missing keys or settings not implemented here."""
    bad = [k for k in UNSUPPORTED_LM_KEYS if params.get(k)]
    if bad:
        raise CheckpointError(f"{PARAMS}: {', '.join(bad)} not supported (plain RoPE, full causal attention only)")
    mm = _get(params, "multimodal", "params.json")
    am = _get(mm, "audio_model_args", "multimodal")
    at = _get(am, "acoustic_transformer_args", "audio_model_args")
    ta = _get(mm, "audio_tokenizer_args", "multimodal")
    dim = int(_get(params, "dim", "params.json"))
    lm = LanguageModel(
        dim=dim, n_layers=int(_get(params, "n_layers", "params.json")),
        n_heads=int(_get(params, "n_heads", "params.json")), n_kv_heads=int(_get(params, "n_kv_heads", "params.json")),
        head_dim=int(params.get("head_dim") or dim // int(params["n_heads"])),
        hidden_dim=int(_get(params, "hidden_dim", "params.json")),
        vocab_size=int(_get(params, "vocab_size", "params.json")), norm_eps=float(_get(params, "norm_eps", "params.json")),
        rope_theta=float(params.get("rope_theta", 10000.0)), tied_embeddings=bool(params.get("tied_embeddings", False)))
    steps = at.get("n_decoding_steps")
    fm = FlowMatching(
        dim=int(at.get("dim", 768)), n_layers=int(at.get("n_layers", 3)), n_heads=int(at.get("n_heads", 6)),
        n_kv_heads=int(at.get("n_kv_heads", 2)), head_dim=int(at.get("head_dim", 128)),
        hidden_dim=int(at.get("hidden_dim", 2048)), use_biases=bool(at.get("use_biases", False)),
        norm_eps=float(at.get("norm_eps", 1e-5)),
        n_decoding_steps=int(steps) if steps is not None else spec.DEFAULT_DECODING_STEPS,
        steps_given=steps is not None)
    if int(_get(at, "input_dim", "acoustic_transformer_args")) != dim or fm.dim != dim:
        raise CheckpointError(f"{PARAMS}: acoustic_transformer_args dim/input_dim must equal the model dim {dim} "
                              "(its semantic head reads the language model's hidden state)")
    if "codebook_sizes" in am:
        sizes = _ints(am["codebook_sizes"])
        sem, ac, n_ac = sizes[0], sizes[1], len(sizes) - 1
    else:
        sem = int(_get(am, "semantic_codebook_size", "audio_model_args"))
        ac = int(_get(am, "acoustic_codebook_size", "audio_model_args"))
        n_ac = int(_get(am, "n_acoustic_codebook", "audio_model_args"))
    codec = Codec(
        sampling_rate=int(ta.get("sampling_rate", 24000)), patch_size=int(ta.get("pretransform_patch_size", 240)),
        patch_kernel=int(ta.get("patch_proj_kernel_size", 7)), semantic_dim=int(ta.get("semantic_dim", 256)),
        acoustic_dim=int(ta.get("acoustic_dim", 36)), dim=int(ta.get("dim", 1024)),
        hidden_dim=int(ta.get("hidden_dim", 4096)), head_dim=int(ta.get("head_dim", 128)),
        n_heads=int(ta.get("n_heads", 8)), n_kv_heads=int(ta.get("n_kv_heads", 8)),
        window=int(ta.get("attn_sliding_window_size", 16)), norm_eps=float(ta.get("norm_eps", 1e-2)),
        qk_norm_eps=float(ta.get("qk_norm_eps", 1e-6)), use_biases=bool(ta.get("use_biases", False)),
        layer_scale=bool(ta.get("layer_scale", True)),
        transformer_lengths=_ints(ta.get("decoder_transformer_lengths_str", "2,2,2,2")),
        kernels=_ints(ta.get("decoder_convs_kernels_str", "3,4,4,4")),
        strides=_ints(ta.get("decoder_convs_strides_str", "1,2,2,2")),
        encoder_strides=_ints(ta.get("encoder_convs_strides_str", "2,2,2,1")))
    for key, want in (("causal", True), ("conv_weight_norm", True), ("qk_norm", True),
                      ("half_attn_window_upon_downsampling", True), ("channels", 1)):
        if ta.get(key, want) != want:
            raise CheckpointError(f"{PARAMS}: audio_tokenizer_args.{key} = {ta[key]!r} not supported (want {want!r})")
    if (codec.acoustic_dim != n_ac or int(ta.get("semantic_codebook_size", 8192)) != sem
            or int(ta.get("acoustic_codebook_size", 21)) != ac):
        raise CheckpointError(f"{PARAMS}: the codec's codebooks do not match audio_model_args")
    if codec.strides[0] != 1 or any(s not in (1, 2) for s in codec.strides) or math.prod(codec.strides) != math.prod(codec.encoder_strides):
        raise CheckpointError(f"{PARAMS}: codec strides {codec.strides} not supported")
    voices = {str(k): int(v) for k, v in (ta.get("voice") or {}).items()}
    return VoxtralInfo(
        lm=lm, fm=fm, codec=codec, semantic_codebook_size=sem, acoustic_codebook_size=ac, n_acoustic_codebook=n_ac,
        audio_token_id=int(am.get("audio_token_id", 24)), begin_audio_token_id=int(am.get("begin_audio_token_id", 25)),
        voices=voices)


def _linear(out: dict[str, tuple[int, ...]], name: str, o: int, i: int, bias: bool = False) -> None:
    out[f"{name}.weight"] = (o, i)
    if bias:
        out[f"{name}.bias"] = (o,)


def _weight_norm(out: dict[str, tuple[int, ...]], name: str, shape: tuple[int, int, int]) -> None:
    """A weight-normed conv (torch parametrizations, dim 0): magnitude [shape[0], 1, 1] and direction."""
    out[f"{name}.conv.parametrizations.weight.original0"] = (shape[0], 1, 1)
    out[f"{name}.conv.parametrizations.weight.original1"] = shape


def codec_blocks(info: VoxtralInfo) -> list[tuple[str, int, int, int]]:
    """The codec decoder's blocks in order: ("conv" | "convT", kernel, stride, 0) or
    ("transformer", layers, 0, sliding window); vLLM-Omni's VoxtralTTSAudioTokenizer builds them so."""
    c = info.codec
    window = c.window
    for s in c.encoder_strides:
        window = window // 2 if s > 1 else window
    blocks: list[tuple[str, int, int, int]] = [("conv", c.kernels[0], c.strides[0], 0)]
    window = window * 2 if c.strides[0] > 1 else window
    for idx, n_layers in enumerate(c.transformer_lengths):
        blocks.append(("transformer", n_layers, 0, window))
        last = idx + 1 == len(c.transformer_lengths)
        if not last and (c.kernels[idx + 1] != 1 or c.strides[idx + 1] != 1):
            blocks.append(("convT", c.kernels[idx + 1], c.strides[idx + 1], 0))
            window = window * 2 if c.strides[idx + 1] > 1 else window
    return blocks


def tensor_shapes(info: VoxtralInfo) -> dict[str, tuple[int, ...]]:
    """Every tensor consolidated.safetensors holds (the codec's encoder aside), with its shape."""
    out: dict[str, tuple[int, ...]] = {}
    lm = info.lm
    out["mm_audio_embeddings.tok_embeddings.weight"] = (lm.vocab_size, lm.dim)
    out["mm_audio_embeddings.audio_codebook_embeddings.embeddings.weight"] = (info.audio_embedding_rows, lm.dim)
    for i in range(lm.n_layers):
        p = f"layers.{i}"
        _linear(out, f"{p}.attention.wq", lm.n_heads * lm.head_dim, lm.dim)
        _linear(out, f"{p}.attention.wk", lm.n_kv_heads * lm.head_dim, lm.dim)
        _linear(out, f"{p}.attention.wv", lm.n_kv_heads * lm.head_dim, lm.dim)
        _linear(out, f"{p}.attention.wo", lm.dim, lm.n_heads * lm.head_dim)
        _linear(out, f"{p}.feed_forward.w1", lm.hidden_dim, lm.dim)
        _linear(out, f"{p}.feed_forward.w2", lm.dim, lm.hidden_dim)
        _linear(out, f"{p}.feed_forward.w3", lm.hidden_dim, lm.dim)
        out[f"{p}.attention_norm.weight"] = (lm.dim,)
        out[f"{p}.ffn_norm.weight"] = (lm.dim,)
    out["norm.weight"] = (lm.dim,)
    if not lm.tied_embeddings:
        out["output.weight"] = (lm.vocab_size, lm.dim)
    fm, b = info.fm, info.fm.use_biases
    a = "acoustic_transformer"
    out[f"{a}.time_embedding.inv_freq"] = (fm.dim // 2,)
    _linear(out, f"{a}.input_projection", fm.dim, info.n_acoustic_codebook)
    _linear(out, f"{a}.time_projection", fm.dim, fm.dim)
    _linear(out, f"{a}.llm_projection", fm.dim, lm.dim)
    _linear(out, f"{a}.semantic_codebook_output", info.semantic_logits, fm.dim, b)
    _linear(out, f"{a}.acoustic_codebook_output", info.n_acoustic_codebook, fm.dim)
    for i in range(fm.n_layers):
        p = f"{a}.layers.{i}"
        _linear(out, f"{p}.attention.wq", fm.n_heads * fm.head_dim, fm.dim, b)
        _linear(out, f"{p}.attention.wk", fm.n_kv_heads * fm.head_dim, fm.dim)
        _linear(out, f"{p}.attention.wv", fm.n_kv_heads * fm.head_dim, fm.dim, b)
        _linear(out, f"{p}.attention.wo", fm.dim, fm.n_heads * fm.head_dim, b)
        _linear(out, f"{p}.feed_forward.w1", fm.hidden_dim, fm.dim)
        _linear(out, f"{p}.feed_forward.w2", fm.dim, fm.hidden_dim, b)
        _linear(out, f"{p}.feed_forward.w3", fm.hidden_dim, fm.dim)
        out[f"{p}.attention_norm.weight"] = (fm.dim,)
        out[f"{p}.ffn_norm.weight"] = (fm.dim,)
    out[f"{a}.norm.weight"] = (fm.dim,)
    c = info.codec
    t = "audio_tokenizer"
    out[f"{t}.quantizer.semantic_codebook.cluster_usage"] = (info.semantic_codebook_size,)
    out[f"{t}.quantizer.semantic_codebook.embedding_sum"] = (info.semantic_codebook_size, c.semantic_dim)
    latent = c.semantic_dim + c.acoustic_dim
    for j, (kind, k, _s, _w) in enumerate(codec_blocks(info)):
        p = f"{t}.decoder_blocks.{j}"
        if kind == "conv":
            _weight_norm(out, p, (c.dim, latent, k))
        elif kind == "convT":
            _weight_norm(out, p, (c.dim, c.dim, k))  # ConvTranspose1d: [in, out, k]
        else:
            for li in range(k):
                q = f"{p}.layers.{li}"
                _linear(out, f"{q}.attention.wq", c.n_heads * c.head_dim, c.dim)
                _linear(out, f"{q}.attention.wk", c.n_kv_heads * c.head_dim, c.dim)
                _linear(out, f"{q}.attention.wv", c.n_kv_heads * c.head_dim, c.dim)
                _linear(out, f"{q}.attention.wo", c.dim, c.n_heads * c.head_dim, c.use_biases)
                out[f"{q}.attention.q_norm.weight"] = (c.n_heads * c.head_dim,)
                out[f"{q}.attention.k_norm.weight"] = (c.n_kv_heads * c.head_dim,)
                _linear(out, f"{q}.feed_forward.w1", c.hidden_dim, c.dim)
                _linear(out, f"{q}.feed_forward.w2", c.dim, c.hidden_dim, c.use_biases)
                _linear(out, f"{q}.feed_forward.w3", c.hidden_dim, c.dim)
                out[f"{q}.attention_norm.weight"] = (c.dim,)
                out[f"{q}.ffn_norm.weight"] = (c.dim,)
                if c.layer_scale:
                    out[f"{q}.attention_scale"] = (c.dim,)
                    out[f"{q}.ffn_scale"] = (c.dim,)
    _weight_norm(out, f"{t}.output_proj", (c.patch_size, c.dim, c.patch_kernel))
    return out


def check_tensors(checkpoint: Path, info: VoxtralInfo) -> dict[str, tuple[int, ...]]:
    """The stored tensors against tensor_shapes: CheckpointError naming missing, unexpected and misshapen
    ones. Returns the expected shapes."""
    path = Path(checkpoint) / WEIGHTS
    require_files(checkpoint, (WEIGHTS,))
    expected = tensor_shapes(info)
    compare_tensors(f"{path} is not a {spec.DISPLAY} checkpoint of its params.json", read_weights(checkpoint, WEIGHTS_STEM).shapes(),
            expected, ignore=lambda n: n.startswith(ENCODER_PREFIXES))
    return expected


def voice_frames(checkpoint: Path) -> dict[str, int]:
    """tekken.json's `audio.voice_num_audio_tokens` (voice -> prompt frames)."""
    path = Path(checkpoint) / TEKKEN
    audio = read_json(path).get("audio")
    if not isinstance(audio, dict) or not isinstance(audio.get("voice_num_audio_tokens"), dict):
        raise CheckpointError(f"{path}: no audio.voice_num_audio_tokens (a text-only tokenizer?)")
    return {str(k): int(v) for k, v in audio["voice_num_audio_tokens"].items()}


def read_checkpoint(checkpoint: Path) -> VoxtralInfo:
    """Check the directory (params, tensors, tokenizer, one embedding file per voice) without torch."""
    root = Path(checkpoint)
    require_files(root, (PARAMS, WEIGHTS, TEKKEN))
    info = parse_params(read_json(root / PARAMS))
    check_tensors(root, info)
    frames = voice_frames(root)
    if not info.voices:
        raise CheckpointError(f"{root / PARAMS}: audio_tokenizer_args has no preset voices")
    for voice in info.voices:
        if voice not in frames:
            raise CheckpointError(f"{root / TEKKEN}: no voice_num_audio_tokens for voice {voice!r}")
        if not (root / VOICES_DIR / f"{voice}.pt").is_file():
            raise CheckpointError(f"{root}: missing {VOICES_DIR}/{voice}.pt")
    return info
