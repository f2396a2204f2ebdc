"""A CosyVoice3 checkpoint (FunAudioLLM's layout) read into typed facts, and the tensors its three
`.pt` files must hold.

The directory: `cosyvoice3.yaml` (hyperpyyaml: `!new:` / `!name:` / `!apply:` tags and `!ref <key>`
arithmetic, read by checkpoint_kit.read_hyperpyyaml),
`llm.pt` (`llm.model.model.*` Qwen2 layers, `llm.model.lm_head.weight`, `speech_embedding.weight`
[speech_token_size + 200, D], `llm_decoder.weight` [speech_token_size + 200, D], no bias), `flow.pt`
(`input_embedding`, `spk_embed_affine_layer`, `pre_lookahead_layer.*`, `decoder.estimator.*`: the DiT),
`hift.pt` (the causal HiFT; a `generator.` prefix tolerated, weight-norm as `parametrizations.weight.
original0/1` or the older `weight_g/weight_v`), `campplus.onnx`, `speech_tokenizer_v3.onnx` and the
`CosyVoice-BlankEN/` Qwen2 directory (config.json + tokenizer files). The `.pt` files are read with
`torch.load(weights_only=True)` (no code runs); every tensor is checked by name and shape, missing or
unexpected ones refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ttscore.contract import cosyvoice3 as spec
from ttscore.contract.errors import CheckpointError
from ttscore.runtime.checkpoint_kit import (
    Shapes,
    Stack,
    compare_tensors,
    decoder_layer_shapes,
    linear_shapes,
    load_torch_state,
    read_hyperpyyaml,
    read_json,
    require_files,
    weight_norm_name,
    weight_norm_shapes,
)

YAML = "cosyvoice3.yaml"
LLM = "llm.pt"
FLOW = "flow.pt"
HIFT = "hift.pt"
CAMPPLUS = "campplus.onnx"
SPEECH_TOKENIZER = "speech_tokenizer_v3.onnx"
# The export copies the two front-end models, as shipped, into this folder of its artifacts.
FRONTEND_DIR = "frontend"
FRONTEND_MODELS = (CAMPPLUS, SPEECH_TOKENIZER)
QWEN_DIR = "CosyVoice-BlankEN"
REQUIRED_FILES = (YAML, LLM, FLOW, HIFT, CAMPPLUS, SPEECH_TOKENIZER, f"{QWEN_DIR}/config.json")
# Qwen2 config keys this implementation does not compute.
UNSUPPORTED_QWEN_KEYS = ("rope_scaling", "use_sliding_window")


@dataclass(frozen=True)
class LanguageModel:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int  # text embedding rows (covers the tokenizer and its added special tokens)
    rms_eps: float
    rope_theta: float
    speech_token_size: int
    top_p: float
    top_k: int
    win_size: int
    tau_r: float

    @property
    def speech_rows(self) -> int:
        return self.speech_token_size + spec.NUM_SPECIAL_SPEECH


@dataclass(frozen=True)
class Flow:
    mel: int
    vocab: int
    spk_embed_dim: int
    token_mel_ratio: int
    pre_lookahead_len: int
    lookahead_channels: int
    dim: int
    depth: int
    heads: int
    dim_head: int
    ff_mult: int
    static_chunk_size: int
    cfg_rate: float
    t_scheduler: str


@dataclass(frozen=True)
class HiFT:
    in_channels: int
    base_channels: int
    nb_harmonics: int
    sampling_rate: int
    nsf_alpha: float
    nsf_sigma: float
    nsf_voiced_threshold: float
    upsample_rates: tuple[int, ...]
    upsample_kernel_sizes: tuple[int, ...]
    n_fft: int
    hop_len: int
    resblock_kernel_sizes: tuple[int, ...]
    resblock_dilation_sizes: tuple[tuple[int, ...], ...]
    source_resblock_kernel_sizes: tuple[int, ...]
    source_resblock_dilation_sizes: tuple[tuple[int, ...], ...]
    lrelu_slope: float
    audio_limit: float
    conv_pre_look_right: int
    f0_cond_channels: int

    @property
    def samples_per_frame(self) -> int:
        return math.prod(self.upsample_rates) * self.hop_len


@dataclass(frozen=True)
class CosyVoice3Info:
    lm: LanguageModel
    flow: Flow
    hift: HiFT
    sample_rate: int
    token_frame_rate: int
    chunk_size: int  # streaming hop in tokens (the yaml's chunk_size)


def _get(d: Any, key: str, where: str) -> Any:
    if not isinstance(d, dict) or key not in d:
        raise CheckpointError(f"{YAML}: {where} has no {key!r}")
    return d[key]


def is_cosyvoice3(checkpoint: Path) -> bool:
    return (Path(checkpoint) / YAML).is_file()


def _qwen(root: Path) -> dict[str, Any]:
    cfg = read_json(root / QWEN_DIR / "config.json")
    for key in UNSUPPORTED_QWEN_KEYS:
        if cfg.get(key):
            raise CheckpointError(f"{QWEN_DIR}/config.json: {key} is not supported")
    return dict(cfg)


def parse(cfg: dict[str, Any], qwen: dict[str, Any]) -> CosyVoice3Info:
    llm, flow, hift = _get(cfg, "llm", "the top level"), _get(cfg, "flow", "the top level"), _get(cfg, "hift", "the top level")
    samp = llm.get("sampling") or {}
    hidden = int(qwen["hidden_size"])
    heads = int(qwen["num_attention_heads"])
    lm = LanguageModel(
        hidden=hidden, layers=int(qwen["num_hidden_layers"]), heads=heads,
        kv_heads=int(qwen.get("num_key_value_heads", heads)), head_dim=int(qwen.get("head_dim") or hidden // heads),
        intermediate=int(qwen["intermediate_size"]), vocab=int(qwen["vocab_size"]),
        rms_eps=float(qwen.get("rms_norm_eps", 1e-6)), rope_theta=float(qwen.get("rope_theta", 10000.0)),
        speech_token_size=int(_get(llm, "speech_token_size", "llm")),
        top_p=float(samp.get("top_p", spec.TOP_P)), top_k=int(samp.get("top_k", spec.TOP_K)),
        win_size=int(samp.get("win_size", spec.WIN_SIZE)), tau_r=float(samp.get("tau_r", spec.TAU_R)))
    for key in ("llm_input_size", "llm_output_size"):
        if key in llm and int(llm[key]) != hidden:
            raise CheckpointError(f"{YAML}: llm.{key} {llm[key]} != the Qwen2 hidden size {hidden}")
    dec = _get(flow, "decoder", "flow")
    est = _get(dec, "estimator", "flow.decoder")
    cfm = _get(dec, "cfm_params", "flow.decoder")
    cfm = cfm.get("content", cfm) if isinstance(cfm, dict) else cfm
    pl = _get(flow, "pre_lookahead_layer", "flow")
    fl = Flow(
        mel=int(_get(flow, "output_size", "flow")), vocab=int(_get(flow, "vocab_size", "flow")),
        spk_embed_dim=int(_get(flow, "spk_embed_dim", "flow")), token_mel_ratio=int(_get(flow, "token_mel_ratio", "flow")),
        pre_lookahead_len=int(_get(flow, "pre_lookahead_len", "flow")), lookahead_channels=int(_get(pl, "channels", "flow.pre_lookahead_layer")),
        dim=int(_get(est, "dim", "estimator")), depth=int(_get(est, "depth", "estimator")),
        heads=int(_get(est, "heads", "estimator")), dim_head=int(_get(est, "dim_head", "estimator")),
        ff_mult=int(_get(est, "ff_mult", "estimator")), static_chunk_size=int(_get(est, "static_chunk_size", "estimator")),
        cfg_rate=float(_get(cfm, "inference_cfg_rate", "cfm_params")), t_scheduler=str(_get(cfm, "t_scheduler", "cfm_params")))
    for key in ("input_size", "output_size"):
        if int(flow[key]) != fl.mel or int(est.get("mel_dim", fl.mel)) != fl.mel:
            raise CheckpointError(f"{YAML}: flow.{key} must equal the mel size {fl.mel}")
    if fl.t_scheduler != "cosine" or str(cfm.get("solver", "euler")) != "euler":
        raise CheckpointError(f"{YAML}: only the Euler solver with the cosine schedule is implemented")
    f0 = _get(hift, "f0_predictor", "hift")
    istft = _get(hift, "istft_params", "hift")
    hf = HiFT(
        in_channels=int(hift["in_channels"]), base_channels=int(hift["base_channels"]),
        nb_harmonics=int(hift["nb_harmonics"]), sampling_rate=int(hift["sampling_rate"]),
        nsf_alpha=float(hift["nsf_alpha"]), nsf_sigma=float(hift["nsf_sigma"]),
        nsf_voiced_threshold=float(hift["nsf_voiced_threshold"]),
        upsample_rates=tuple(int(x) for x in hift["upsample_rates"]),
        upsample_kernel_sizes=tuple(int(x) for x in hift["upsample_kernel_sizes"]),
        n_fft=int(istft["n_fft"]), hop_len=int(istft["hop_len"]),
        resblock_kernel_sizes=tuple(int(x) for x in hift["resblock_kernel_sizes"]),
        resblock_dilation_sizes=tuple(tuple(int(y) for y in x) for x in hift["resblock_dilation_sizes"]),
        source_resblock_kernel_sizes=tuple(int(x) for x in hift["source_resblock_kernel_sizes"]),
        source_resblock_dilation_sizes=tuple(tuple(int(y) for y in x) for x in hift["source_resblock_dilation_sizes"]),
        lrelu_slope=float(hift["lrelu_slope"]), audio_limit=float(hift["audio_limit"]),
        conv_pre_look_right=int(hift["conv_pre_look_right"]), f0_cond_channels=int(f0["cond_channels"]))
    if hf.sampling_rate == 22050:
        raise CheckpointError(f"{YAML}: a 22050 Hz HiFT (SineGen) is CosyVoice2's, not CosyVoice3's")
    return CosyVoice3Info(lm=lm, flow=fl, hift=hf, sample_rate=int(cfg.get("sample_rate", hf.sampling_rate)),
                          token_frame_rate=int(cfg.get("token_frame_rate", 25)), chunk_size=int(cfg.get("chunk_size", 25)))


# --- the tensors ---------------------------------------------------------------------------------
def llm_shapes(info: CosyVoice3Info) -> Shapes:
    lm = info.lm
    stack = Stack(hidden_size=lm.hidden, intermediate_size=lm.intermediate, num_layers=lm.layers, num_heads=lm.heads,
                  num_kv_heads=lm.kv_heads, head_dim=lm.head_dim, rms_norm_eps=lm.rms_eps)
    out: Shapes = {"llm.model.model.embed_tokens.weight": (lm.vocab, lm.hidden)}
    for i in range(lm.layers):
        decoder_layer_shapes(out, f"llm.model.model.layers.{i}.", stack, qk_norm=False, qkv_bias=True)
    out["llm.model.model.norm.weight"] = (lm.hidden,)
    out["llm.model.lm_head.weight"] = (lm.vocab, lm.hidden)
    out["speech_embedding.weight"] = (lm.speech_rows, lm.hidden)
    out["llm_decoder.weight"] = (lm.speech_rows, lm.hidden)
    return out


def flow_shapes(info: CosyVoice3Info) -> Shapes:
    f = info.flow
    dim, inner, ff = f.dim, f.heads * f.dim_head, f.dim * f.ff_mult
    e = "decoder.estimator."
    out: Shapes = {
        "input_embedding.weight": (f.vocab, f.mel),
        "spk_embed_affine_layer.weight": (f.mel, f.spk_embed_dim), "spk_embed_affine_layer.bias": (f.mel,),
        "pre_lookahead_layer.conv1.weight": (f.lookahead_channels, f.mel, f.pre_lookahead_len + 1),
        "pre_lookahead_layer.conv1.bias": (f.lookahead_channels,),
        "pre_lookahead_layer.conv2.weight": (f.mel, f.lookahead_channels, 3), "pre_lookahead_layer.conv2.bias": (f.mel,),
        e + "time_embed.time_mlp.0.weight": (dim, 256), e + "time_embed.time_mlp.0.bias": (dim,),
        e + "time_embed.time_mlp.2.weight": (dim, dim), e + "time_embed.time_mlp.2.bias": (dim,),
        e + "input_embed.proj.weight": (dim, 4 * f.mel), e + "input_embed.proj.bias": (dim,),
        e + "input_embed.conv_pos_embed.conv1.0.weight": (dim, dim // 16, 31),
        e + "input_embed.conv_pos_embed.conv1.0.bias": (dim,),
        e + "input_embed.conv_pos_embed.conv2.0.weight": (dim, dim // 16, 31),
        e + "input_embed.conv_pos_embed.conv2.0.bias": (dim,),
        e + "rotary_embed.inv_freq": (f.dim_head // 2,),
    }
    for i in range(f.depth):
        p = f"{e}transformer_blocks.{i}."
        for name, rows, cols in (("attn_norm.linear", 6 * dim, dim), ("attn.to_q", inner, dim), ("attn.to_k", inner, dim),
                                 ("attn.to_v", inner, dim), ("attn.to_out.0", dim, inner), ("ff.ff.0.0", ff, dim),
                                 ("ff.ff.2", dim, ff)):
            linear_shapes(out, p + name, rows, cols, bias=True)
    out.update({e + "norm_out.linear.weight": (2 * dim, dim), e + "norm_out.linear.bias": (2 * dim,),
                e + "proj_out.weight": (f.mel, dim), e + "proj_out.bias": (f.mel,)})
    return out


def _resblock(out: Shapes, name: str, ch: int, k: int, dilations: tuple[int, ...]) -> None:
    for j in range(len(dilations)):
        weight_norm_shapes(out, f"{name}.convs1.{j}", (ch, ch, k))
        weight_norm_shapes(out, f"{name}.convs2.{j}", (ch, ch, k))
        out[f"{name}.activations1.{j}.alpha"] = (ch,)
        out[f"{name}.activations2.{j}.alpha"] = (ch,)


def hift_shapes(info: CosyVoice3Info) -> Shapes:
    """hift.pt's tensors (transposed-conv upsamplers are plain convs after nearest upsampling; a
    ConvTranspose-free causal HiFT). Weight-norm g of a Conv1d has shape [out, 1, 1]."""
    h = info.hift
    base, n_fft = h.base_channels, h.n_fft
    out: Shapes = {}
    out["m_source.l_linear.weight"] = (1, h.nb_harmonics + 1)
    out["m_source.l_linear.bias"] = (1,)
    weight_norm_shapes(out, "conv_pre", (base, h.in_channels, h.conv_pre_look_right + 1))
    for i, k in enumerate(h.upsample_kernel_sizes):
        weight_norm_shapes(out, f"ups.{i}", (base // 2 ** (i + 1), base // 2 ** i, k))
    rates = [1, *list(h.upsample_rates[::-1][:-1])]
    cum = [math.prod(rates[: j + 1]) for j in range(len(rates))][::-1]
    for i, (u, k, d) in enumerate(zip(cum, h.source_resblock_kernel_sizes, h.source_resblock_dilation_sizes, strict=False)):
        ch = base // 2 ** (i + 1)
        out[f"source_downs.{i}.weight"] = (ch, n_fft + 2, 1 if u == 1 else 2 * u)
        out[f"source_downs.{i}.bias"] = (ch,)
        _resblock(out, f"source_resblocks.{i}", ch, k, d)
    n = len(h.resblock_kernel_sizes)
    for i in range(len(h.upsample_rates)):
        ch = base // 2 ** (i + 1)
        for j, (k, d) in enumerate(zip(h.resblock_kernel_sizes, h.resblock_dilation_sizes, strict=True)):
            _resblock(out, f"resblocks.{i * n + j}", ch, k, d)
    weight_norm_shapes(out, "conv_post", (n_fft + 2, base // 2 ** len(h.upsample_rates), 7))
    c = h.f0_cond_channels
    for j, (cin, k) in enumerate(((h.in_channels, 4), (c, 3), (c, 3), (c, 3), (c, 3))):
        weight_norm_shapes(out, f"f0_predictor.condnet.{2 * j}", (c, cin, k))
    out["f0_predictor.classifier.weight"] = (1, c)
    out["f0_predictor.classifier.bias"] = (1,)
    return out


def _hift_name(name: str) -> str:
    return weight_norm_name(name.removeprefix("generator."))


def read_info(checkpoint: Path) -> CosyVoice3Info:
    root = Path(checkpoint)
    require_files(root, REQUIRED_FILES)
    return parse(read_hyperpyyaml(root / YAML), _qwen(root))


def read_checkpoint(checkpoint: Path) -> CosyVoice3Info:
    """The checkpoint's facts, every tensor of the three `.pt` files checked by name and shape."""
    root = Path(checkpoint)
    info = read_info(root)
    for name, want, rename in ((LLM, llm_shapes(info), None), (FLOW, flow_shapes(info), None),
                               (HIFT, hift_shapes(info), _hift_name)):
        state = load_torch_state(root / name, rename)
        compare_tensors(str(root / name), {k: tuple(v.shape) for k, v in state.items()}, want)
    return info
