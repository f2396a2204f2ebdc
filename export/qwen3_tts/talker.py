"""Export of the Qwen3-TTS talker step and the per-frame code predictor to ONNX, plus the lookup tables.

Both graphs are explicit torch wrappers around the ORIGINAL modules and weights of the reference
model (`tts_model.talker`): no HF DynamicCache, no GenerationMixin, no transformers mask helpers.
Masks are built from arange/where, the KV cache is explicit per-layer tensors, and RoPE is plain
RoPE (the talker's interleaved MRoPE is identical to it because its three position rows are always
equal; `validate_talker` checks that against the reference module, which does run MRoPE).

Tensor names, dtypes and dims come from `ttscore.contract.qwen3_tts` (talker_spec / code_predictor_spec).

Exporter: the legacy TorchScript exporter (`torch.onnx.export(..., dynamo=False)`). It handles the
wrappers directly, is fast even for the code predictor unrolled over 15 steps (dynamo's optimizer did
not finish on it), and takes `dynamic_axes` by name. Its only wrinkle, Identity nodes in front of
weights used more than once, is removed before int8 quantization (`export.quantize.quantize_int8`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from export.quantize import quantize_int8
from export.tracing import (
    EXPORTER_BOUND,
    ErrorTracker,
    check,
    export_bound,
    file_size,
    max_abs,
    ort_session,
    torch_threads,
)
from ttscore.contract.errors import ExportError
from ttscore.contract.qwen3_tts import GraphSpec, code_predictor_spec, talker_spec

__all__ = [
    "CodePredictorFrame",
    "TalkerReference",
    "TalkerStep",
    "check_talker",
    "code_predictor_graph_spec",
    "export_code_predictor",
    "export_tables",
    "export_talker",
    "numpy_filter",
    "numpy_sample",
    "quantize_int8",
    "sort_window",
    "talker_graph_spec",
    "talker_reference",
    "validate_code_predictor",
    "validate_int8",
    "validate_talker",
]

logger = logging.getLogger(__name__)

# Validation tolerances (max abs error, fp32 ONNX Runtime vs fp32 PyTorch reference).
TALKER_TOL = {"logits": 1e-4, "hidden": 1e-4, "new_key": 1e-4, "new_value": 1e-4}
CODE_PREDICTOR_TOL = {"codec_embed_sum": 1e-4, "logits": 1e-4}
_NEG = torch.finfo(torch.float32).min


# --------------------------------------------------------------------------------------------------
# model checks and specs


def _talker(tts_model: Any) -> Any:
    talker: Any = getattr(tts_model, "talker", None)
    check(talker is not None, "model has no `talker` (expected Qwen3TTSForConditionalGeneration)")
    # Weights still on the meta device belong to other export stages (export.qwen3_tts.reference.StagedReference).
    params = [p for p in talker.parameters() if not p.is_meta]
    check(all(p.dtype == torch.float32 for p in params), "export needs a float32 model (load with dtype=float32)")
    check(all(p.device.type == "cpu" for p in params), "export runs on CPU: move the model to cpu first")
    tts_model.eval()
    return talker


def _check_rope(rotary: Any, what: str) -> None:
    rope_type = getattr(rotary, "rope_type", "default")
    check(rope_type == "default", f"{what}: rope_type {rope_type!r} is not supported (plain RoPE only)")


def _check_attention(cfg: Any, what: str) -> None:
    check(getattr(cfg, "sliding_window", None) is None, f"{what}: sliding-window attention is not supported")
    for t in getattr(cfg, "layer_types", None) or []:
        check(t == "full_attention", f"{what}: layer type {t!r} is not supported")


def _head_dim(cfg: Any) -> int:
    return int(getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads)


def talker_graph_spec(tts_model: Any) -> GraphSpec:
    cfg = tts_model.talker.config
    return talker_spec(cfg.num_hidden_layers, cfg.hidden_size, cfg.num_key_value_heads, _head_dim(cfg), cfg.vocab_size)


def code_predictor_graph_spec(tts_model: Any) -> GraphSpec:
    cfg = tts_model.talker.config
    return code_predictor_spec(cfg.hidden_size, cfg.num_code_groups)


# --------------------------------------------------------------------------------------------------
# explicit decoder math around the original modules


def _rotate_half(x: torch.Tensor, half: int) -> torch.Tensor:
    """RoPE's rotate_half with the split point a Python int (head_dim // 2): the graph slices at
    constants, where `x.shape[-1] // 2` traces as Shape -> Gather -> Div -> Unsqueeze per call."""
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class _Reshape(torch.autograd.Function):
    """`x.reshape(shape)` with ONNX's conventions in `shape` (0: that dimension of x, -1: inferred;
    with a 0, the exporter's shape inference wants a -1 too), exported as ONE Reshape by a constant
    shape. A reshape whose sizes the wrapper reads from a
    tensor (`h.shape[0]`, ...) traces as Shape/Gather/Unsqueeze/Concat nodes before every Reshape:
    about a third of the talker's nodes, each an operator call per step."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
        return x.reshape([x.shape[i] if d == 0 else d for i, d in enumerate(shape)])

    @staticmethod
    def symbolic(g: Any, x: Any, shape: tuple[int, ...]) -> Any:
        return g.op("Reshape", x, g.op("Constant", value_t=torch.tensor(shape, dtype=torch.int64)))


def _reshape(x: torch.Tensor, *shape: int) -> torch.Tensor:
    out: torch.Tensor = _Reshape.apply(x, shape)
    return out


def _cos_sin(inv_freq: torch.Tensor, scaling: float, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """positions [B, T] (any int dtype) -> cos, sin [B, 1, T, head_dim], as the reference computes them."""
    freqs = positions.to(torch.float32).unsqueeze(-1) * inv_freq  # == inv_freq @ positions (one product each)
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * scaling).unsqueeze(1), (emb.sin() * scaling).unsqueeze(1)


def _decoder_layer(
    layer: Any,
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    past_k: torch.Tensor | None,
    past_v: torch.Tensor | None,
    allowed: torch.Tensor | None,
    heads: int,
    kv_heads: int,
    head_dim: int,
    split_past: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One Qwen3 decoder layer (talker or code predictor: same structure) with explicit KV.

    x [B, T, H]; past_k/v [B, kv, P, hd] or None; allowed: bool broadcastable to
    [B, kv, n_rep*T, P+T] (`_fold_mask`) or None (attend to everything). Returns (out [B, T, H],
    k_new, v_new [B, kv, T, hd]). Every reshape has a constant shape (`_reshape`), so the graph
    has no shape arithmetic per layer.
    `split_past` (talker): attend to the past and the new keys without concatenating the cache.
    GQA without materializing repeated K/V: the query heads of one kv head are folded into the
    query-length axis ([B, kv, n_rep*T, hd], row r*T + t for query head kv*n_rep + r at position
    t); head h uses kv head h // n_rep as repeat_kv does.
    """
    attn: Any = layer.self_attn
    half = head_dim // 2
    residual = x
    h = layer.input_layernorm(x)
    q = attn.q_norm(_reshape(attn.q_proj(h), 0, 0, heads, -1)).transpose(1, 2)
    k = attn.k_norm(_reshape(attn.k_proj(h), 0, 0, kv_heads, -1)).transpose(1, 2)
    v = _reshape(attn.v_proj(h), 0, 0, kv_heads, -1).transpose(1, 2)
    q = q * cos + _rotate_half(q, half) * sin
    k = k * cos + _rotate_half(k, half) * sin
    qg = _reshape(q, 0, kv_heads, -1, head_dim)
    values: torch.Tensor | None
    if split_past and past_k is not None and past_v is not None:
        # Scores against the past and the new keys separately, so the graph never concatenates
        # (copies) the whole cache: the runtime feeds its preallocated per-slot KV arena as `past`
        # and only the scores row [.., P + T] is joined.
        w_past = torch.matmul(qg, past_k.transpose(2, 3)) * attn.scaling  # [B, kv, n_rep*T, P]
        w_new = torch.matmul(qg, k.transpose(2, 3)) * attn.scaling  # [B, kv, n_rep*T, T]
        w = torch.cat((w_past, w_new), dim=-1)
        values = None
    else:
        keys = k if past_k is None else torch.cat((past_k, k), dim=2)
        values = v if past_v is None else torch.cat((past_v, v), dim=2)
        w = torch.matmul(qg, keys.transpose(2, 3)) * attn.scaling  # [B, kv, n_rep*T, S]
    if allowed is not None:
        w = torch.where(allowed, w, torch.tensor(_NEG, dtype=w.dtype))
    w = torch.softmax(w, dim=-1)
    if values is None:
        assert past_v is not None
        p = past_v.shape[2]
        o = torch.matmul(w[..., :p], past_v) + torch.matmul(w[..., p:], v)  # [B, kv, n_rep*T, hd]
    else:
        o = torch.matmul(w, values)  # [B, kv, n_rep*T, hd]
    o = _reshape(o, 0, heads, -1, head_dim).transpose(1, 2)  # [B, T, heads, hd]
    o = attn.o_proj(_reshape(o, 0, 0, -1))
    x = residual + o
    x = x + layer.mlp(layer.post_attention_layernorm(x))
    return x, k, v


def _fold_mask(allowed: torch.Tensor, n_rep: int) -> torch.Tensor:
    """allowed [B, T, S] -> [B, 1, n_rep*T, S], the rows of `_decoder_layer`'s folded queries (row
    r*T + t is query position t): built once per graph call, shared by every layer."""
    return allowed.unsqueeze(1).repeat(1, 1, n_rep, 1)


class TalkerStep(nn.Module):
    """The `talker` GraphSpec over the original talker modules (see ttscore.contract.qwen3_tts.talker_spec)."""

    inv_freq: torch.Tensor
    layers: Any

    def __init__(self, tts_model: Any) -> None:
        super().__init__()
        talker = _talker(tts_model)
        cfg = talker.config
        _check_attention(cfg, "talker")
        _check_rope(talker.model.rotary_emb, "talker")
        self.layers = talker.model.layers
        self.norm = talker.model.norm
        self.codec_head = talker.codec_head
        self.heads = int(cfg.num_attention_heads)
        self.kv_heads = int(cfg.num_key_value_heads)
        self.head_dim = _head_dim(cfg)
        self.scaling = float(talker.model.rotary_emb.attention_scaling)
        self.register_buffer("inv_freq", talker.model.rotary_emb.inv_freq.detach().clone().float(), persistent=False)

    def forward(
        self, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor, *past: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        t = inputs_embeds.shape[1]
        total = attention_mask.shape[1]
        key_pos = torch.arange(total, device=attention_mask.device)
        query_pos = key_pos[total - t :]  # absolute slots of the new tokens: P .. P+T-1
        causal = key_pos.unsqueeze(0) <= query_pos.unsqueeze(1)  # [T, S]
        allowed = _fold_mask(causal.unsqueeze(0) & (attention_mask != 0).unsqueeze(1), self.heads // self.kv_heads)
        cos, sin = _cos_sin(self.inv_freq, self.scaling, position_ids)
        x = inputs_embeds
        new: list[torch.Tensor] = []
        for i, layer in enumerate(self.layers):
            x, k, v = _decoder_layer(
                layer, x, cos, sin, past[2 * i], past[2 * i + 1], allowed, self.heads, self.kv_heads, self.head_dim,
                split_past=True,
            )
            new += [k, v]
        # Norm and head on the last position only (the norm is per position, so this is exact).
        last = self.norm(x[:, -1:, :])
        logits = self.codec_head(last)  # 3-D input keeps it a MatMul (quantizable), not a Gemm
        return (logits[:, 0], last[:, 0], *new)


# --------------------------------------------------------------------------------------------------
# sampling (torch graph version and the numpy mirror used to validate it)


# Tokens beyond the k-th kept in the sorted window, so that top-k ties at the k-th value (HF keeps
# every token >= the k-th largest) stay exact unless more than TOPK_SLACK tokens tie there.
TOPK_SLACK = 8


class _TopK(torch.autograd.Function):
    """Sorted top-k along the last axis with a k computed inside the graph (a plain torch.topk
    would bake the traced k in as a constant)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.topk(x, int(k.reshape(-1)[0]), dim=-1, largest=True, sorted=True)

    @staticmethod
    def symbolic(g: Any, x: Any, k: Any) -> Any:
        return g.op("TopK", x, k, axis_i=-1, largest_i=1, sorted_i=1, outputs=2)


def sort_window(do_sample: Any, temperature: Any, top_k: Any, vocab: int, xp: Any = torch) -> Any:
    """How many sorted tokens the batch needs: max over sampled rows of min(top_k + slack, vocab),
    vocab for a sampled row without top-k, 1 when nothing is sampled. Sorting only this window
    instead of the whole vocabulary is what keeps batched sampling cheap (onnxruntime's TopK with
    k = 2048 costs ~2 ms per call at batch 8; k = 58 costs ~25 us)."""
    sampled = do_sample & (temperature > 0)
    k_on = (top_k > 0) & (top_k < vocab)
    if xp is torch:
        need = torch.where(k_on, torch.clamp(top_k + TOPK_SLACK, max=vocab), torch.full_like(top_k, vocab))
        need = torch.where(sampled, need, torch.ones_like(top_k))
        return torch.cat((need, torch.ones_like(top_k[:1]))).max().reshape(1)
    need_np = np.where(np.asarray(k_on), np.minimum(np.asarray(top_k) + TOPK_SLACK, vocab), vocab)
    need_np = np.where(np.asarray(sampled), need_np, 1)
    return int(max(int(need_np.max(initial=1)), 1))


def _torch_sample(
    logits: torch.Tensor,
    u: torch.Tensor,
    do_sample: torch.Tensor,
    temperature: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
) -> torch.Tensor:
    """Per-row HF sampling semantics, see `numpy_sample` (the normative description)."""
    vocab = logits.shape[-1]
    greedy = torch.argmax(logits, dim=-1)
    sampled_row = do_sample & (temperature > 0)
    temp = torch.where(temperature > 0, temperature, torch.ones_like(temperature))
    scaled = logits / temp.unsqueeze(-1)
    window = sort_window(do_sample, temperature, top_k, vocab)
    sv, si = _TopK.apply(scaled, window)  # [B, K] descending, ties: lower id first
    index = torch.cumsum(torch.ones_like(si), dim=-1) - 1  # 0 .. K-1
    k_on = (top_k > 0) & (top_k < vocab)
    kth = torch.gather(sv, 1, torch.minimum(torch.clamp(top_k - 1, min=0).unsqueeze(-1), window - 1))
    keep = (sv >= kth) | (~k_on).unsqueeze(-1)
    neg_inf = torch.tensor(float("-inf"), dtype=sv.dtype)
    probs = torch.softmax(torch.where(keep, sv, neg_inf), dim=-1)
    exclusive = torch.cumsum(probs, dim=-1) - probs  # mass of the strictly more likely tokens
    keep = keep & ((exclusive < top_p.unsqueeze(-1)) | (top_p >= 1.0).unsqueeze(-1) | (index == 0))
    cdf = torch.cumsum(torch.softmax(torch.where(keep, sv, neg_inf), dim=-1), dim=-1)
    n_kept = keep.to(torch.int64).sum(-1)
    j = (cdf <= u.unsqueeze(-1)).to(torch.int64).sum(-1)
    j = torch.minimum(j, n_kept - 1)
    pick = torch.gather(si, 1, j.unsqueeze(-1)).squeeze(-1)
    return torch.where(sampled_row, pick, greedy)


def numpy_filter(
    row: np.ndarray, temperature: float, top_k: int, top_p: float, window: int | None = None
) -> tuple[np.ndarray, np.ndarray, int]:
    """Temperature, top-k, top-p on one row of logits (float32), as the graph does it.

    Returns (order, scaled_sorted, n): token ids in descending order of scaled logit (ties: lower id
    first), the scaled logits in that order, and how many leading tokens are kept. `window`: only
    the first `window` sorted tokens exist (the graph sorts `sort_window(...)` tokens).
    """
    vocab = row.shape[-1]
    scaled = np.asarray(row, dtype=np.float32) / np.float32(temperature)
    order = np.argsort(-scaled, kind="stable")
    if window is not None:
        order = order[:window]
    sv = scaled[order]
    keep = np.ones(len(order), dtype=bool)
    if 0 < top_k < vocab:
        keep = sv >= sv[top_k - 1]
    if top_p < 1.0:
        masked = np.where(keep, sv, -np.inf).astype(np.float32)
        e = np.exp(masked - masked[0])
        probs = (e / e.sum(dtype=np.float32)).astype(np.float32)
        exclusive = np.cumsum(probs, dtype=np.float32) - probs  # mass of the strictly more likely tokens
        keep_p = exclusive < np.float32(top_p)
        keep_p[0] = True
        keep &= keep_p
    return order, sv, int(keep.sum())  # kept tokens always form a prefix of the order


def numpy_sample(
    logits: np.ndarray,
    u: np.ndarray,
    do_sample: np.ndarray,
    temperature: np.ndarray,
    top_k: np.ndarray,
    top_p: np.ndarray,
) -> np.ndarray:
    """Reference implementation of the in-graph sampler, row by row (float32 math).

    Rows with do_sample false (or temperature <= 0) take argmax(logits). Otherwise, HF order:
    logits / temperature -> top-k (keep logits >= the k-th largest; k <= 0 or k >= vocab: off) ->
    top-p (keep a token iff the probability mass of the tokens ranked before it is < top_p; the top
    token is always kept; top_p >= 1: off) -> softmax over the kept tokens -> inverse CDF with u over
    the kept tokens in descending order (ties: lower token id first): the first token whose
    cumulative probability exceeds u.

    Only the batch's `sort_window` best tokens are sorted; that equals the rule above unless more
    than TOPK_SLACK tokens tie exactly at a row's k-th value.
    """
    logits = np.asarray(logits, dtype=np.float32)
    out = np.empty(logits.shape[0], dtype=np.int64)
    window = sort_window(
        np.asarray(do_sample, bool), np.asarray(temperature, np.float32), np.asarray(top_k, np.int64), logits.shape[-1], xp=np
    )
    for b in range(logits.shape[0]):
        if not bool(do_sample[b]) or not float(temperature[b]) > 0:
            out[b] = int(np.argmax(logits[b]))
            continue
        order, sv, n = numpy_filter(logits[b], float(temperature[b]), int(top_k[b]), float(top_p[b]), window)
        e = np.exp(sv[:n] - sv[0])
        cdf = np.cumsum(e / e.sum(dtype=np.float32), dtype=np.float32)
        j = min(int((cdf <= np.float32(u[b])).sum()), n - 1)
        out[b] = int(order[j])
    return out


class CodePredictorFrame(nn.Module):
    """The `code_predictor` GraphSpec: one frame of the code predictor, unrolled over G-1 codes."""

    cos: torch.Tensor
    sin: torch.Tensor
    layers: Any
    lm_head: Any
    group_embeddings: Any

    def __init__(self, tts_model: Any) -> None:
        super().__init__()
        talker = _talker(tts_model)
        cp = talker.code_predictor
        cfg = cp.config
        _check_attention(cfg, "code predictor")
        _check_rope(cp.model.rotary_emb, "code predictor")
        self.groups = int(talker.config.num_code_groups)
        check(
            int(cfg.num_code_groups) == self.groups and len(cp.lm_head) == self.groups - 1,
            "code predictor num_code_groups disagrees with the talker",
        )
        self.talker_embedding = talker.model.codec_embedding
        self.group_embeddings = cp.model.codec_embedding
        self.proj = cp.small_to_mtp_projection
        self.layers = cp.model.layers
        self.norm = cp.model.norm
        self.lm_head = cp.lm_head
        self.heads = int(cfg.num_attention_heads)
        self.kv_heads = int(cfg.num_key_value_heads)
        self.head_dim = _head_dim(cfg)
        scaling = float(cp.model.rotary_emb.attention_scaling)
        inv_freq = cp.model.rotary_emb.inv_freq.detach().float()
        # Positions restart at 0 every frame: 0, 1 for the prefill, then 2 .. G-1 (constants).
        cos, sin = _cos_sin(inv_freq, scaling, torch.arange(self.groups).unsqueeze(0))
        self.register_buffer("cos", cos, persistent=False)  # [1, 1, G, hd]
        self.register_buffer("sin", sin, persistent=False)

    def _run(self, x: torch.Tensor, pos: int, n: int, kv: list[torch.Tensor] | None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        cos, sin = self.cos[:, :, pos : pos + n], self.sin[:, :, pos : pos + n]
        allowed = None
        if n > 1:  # the 2-token prefill is causal; single steps see the whole (valid) cache
            allowed = _fold_mask(torch.ones(n, n, dtype=torch.bool).tril().unsqueeze(0), self.heads // self.kv_heads)
        new_kv: list[torch.Tensor] = []
        for i, layer in enumerate(self.layers):
            past_k = None if kv is None else kv[2 * i]
            past_v = None if kv is None else kv[2 * i + 1]
            x, k, v = _decoder_layer(layer, x, cos, sin, past_k, past_v, allowed, self.heads, self.kv_heads, self.head_dim)
            new_kv += [k if past_k is None else torch.cat((past_k, k), 2), v if past_v is None else torch.cat((past_v, v), 2)]
        return self.norm(x[:, -1:, :]), new_kv

    def forward(
        self,
        hidden: torch.Tensor,
        code0: torch.Tensor,
        noise: torch.Tensor,
        do_sample: torch.Tensor,
        temperature: torch.Tensor,
        top_k: torch.Tensor,
        top_p: torch.Tensor,
        return_logits: bool = False,
    ) -> tuple[torch.Tensor, ...]:
        e0 = self.talker_embedding(code0)  # [B, H]
        x = self.proj(torch.stack((hidden, e0), dim=1))
        h, kv = self._run(x, 0, 2, None)
        embeds = [e0]
        codes: list[torch.Tensor] = []
        all_logits: list[torch.Tensor] = []
        for i in range(self.groups - 1):
            if i > 0:
                h, kv = self._run(self.proj(embeds[-1].unsqueeze(1)), i + 1, 1, kv)
            logits = self.lm_head[i](h)[:, 0]  # [B, V]
            code = _torch_sample(logits, noise[:, i], do_sample, temperature, top_k, top_p)
            codes.append(code)
            all_logits.append(logits)
            embeds.append(self.group_embeddings[i](code))
        codec_embed_sum = torch.stack(embeds, dim=1).sum(1)  # as the reference: cat(...).sum(1)
        if return_logits:
            return torch.stack(codes, 1), codec_embed_sum, torch.stack(all_logits, 1)
        return torch.stack(codes, 1), codec_embed_sum


# --------------------------------------------------------------------------------------------------
# export driver


def _export(module: nn.Module, args: tuple[torch.Tensor, ...], spec: GraphSpec, out_dir: Path, opset: int) -> Path:
    """export.tracing.export_bound with this module's exporter note."""
    path = export_bound(module, args, spec, out_dir, opset, EXPORTER_BOUND)
    _check_io(path, spec)
    return path


def _check_io(path: Path, spec: GraphSpec) -> None:
    """The saved graph has exactly the spec's names, dtypes and (symbolic) dims, in order."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    for kind, got, want in (("input", model.graph.input, spec.inputs), ("output", model.graph.output, spec.outputs)):
        check([v.name for v in got] == [t.name for t in want], f"{spec.name}: {kind} names {[v.name for v in got]} != spec")
        for v, t in zip(got, want, strict=True):
            dtype = onnx.helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type).name
            dims = tuple(d.dim_param if d.dim_param else d.dim_value for d in v.type.tensor_type.shape.dim)
            check(dtype == t.dtype and dims == t.dims, f"{spec.name}: {kind} {v.name} is {dtype}{dims}, spec {t.dtype}{t.dims}")


def _timed_export(wrapper: Any, args: tuple[Any, ...], spec: Any, out_dir: Path, opset: int
                  ) -> tuple[Path, dict[str, Any]]:
    """`_export` timed: the graph's path and its manifest entry before validation."""
    t0 = time.perf_counter()
    path = _export(wrapper, args, spec, out_dir, opset)
    seconds = time.perf_counter() - t0
    logger.info("exported %s in %.1fs", path.name, seconds)
    return path, {"file": path.name, "bytes": file_size(path), "exporter": EXPORTER_BOUND, "opset": opset,
                  "seconds": round(seconds, 2), "spec": spec.to_json()}


def export_talker(
    tts_model: Any, out_dir: Path, *, opset: int = 18, validate: bool = True, seed: int = 0
) -> dict[str, Any]:
    """Write `talker.onnx` (spec `talker`) into out_dir, validate it and return the manifest entry."""
    spec = talker_graph_spec(tts_model)
    wrapper = TalkerStep(tts_model).eval()
    cfg = tts_model.talker.config
    b, p, t = 2, 3, 2  # trace with non-trivial sizes on every dynamic axis (0 and 1 would be specialized)
    g = torch.Generator().manual_seed(seed)
    args = (
        torch.randn(b, t, cfg.hidden_size, generator=g),
        torch.ones(b, p + t, dtype=torch.int64),
        torch.arange(p, p + t).repeat(b, 1),
        *[torch.randn(b, wrapper.kv_heads, p, wrapper.head_dim, generator=g) for _ in range(2 * cfg.num_hidden_layers)],
    )
    path, report = _timed_export(wrapper, args, spec, out_dir, opset)
    if validate:
        report.update(validate_talker(tts_model, path, seed=seed))
    return report


def export_code_predictor(
    tts_model: Any, out_dir: Path, *, opset: int = 18, validate: bool = True, seed: int = 0
) -> dict[str, Any]:
    """Write `code_predictor.onnx` (spec `code_predictor`), validate it and return the manifest entry."""
    spec = code_predictor_graph_spec(tts_model)
    wrapper = CodePredictorFrame(tts_model).eval()
    cfg = tts_model.talker.config
    b, g = 2, wrapper.groups - 1
    args = (
        torch.randn(b, cfg.hidden_size),
        torch.tensor([1, 2], dtype=torch.int64),
        torch.rand(b, g),
        torch.tensor([True, False]),
        torch.tensor([0.9, 1.0]),
        torch.tensor([50, 0], dtype=torch.int64),
        torch.tensor([0.8, 1.0]),
    )
    path, report = _timed_export(wrapper, args, spec, out_dir, opset)
    if validate:
        report.update(validate_code_predictor(tts_model, path, seed=seed))
    return report


def export_tables(tts_model: Any, out_dir: Path, *, chunk: int = 8192) -> dict[str, Any]:
    """text_embeddings.npy [text_vocab, H], codec_embeddings.npy [codec_vocab, H] and
    group_embeddings.npy [G-1, codebook, H] (float32; the predictor tables have the TALKER width)."""
    talker = _talker(tts_model)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    hidden = int(talker.config.hidden_size)
    text_vocab = int(talker.model.text_embedding.num_embeddings)
    text_path = out_dir / "text_embeddings.npy"
    table = np.lib.format.open_memmap(text_path, mode="w+", dtype=np.float32, shape=(text_vocab, hidden))
    with torch.no_grad():
        for start in range(0, text_vocab, chunk):
            ids = torch.arange(start, min(start + chunk, text_vocab))
            table[start : start + len(ids)] = talker.text_projection(talker.model.text_embedding(ids)).numpy()
        table.flush()
        # Spot check: a few ids through the modules one at a time (batch independence of the table).
        probe = [0, text_vocab // 2, text_vocab - 1]
        one = talker.text_projection(talker.model.text_embedding(torch.tensor(probe))).numpy()
        text_err = max_abs(table[probe], one)
        del table
        codec = talker.model.codec_embedding.weight.detach().numpy().astype(np.float32)
        np.save(out_dir / "codec_embeddings.npy", codec)
        groups = np.stack([e.weight.detach().numpy() for e in talker.code_predictor.model.codec_embedding]).astype(np.float32)
        np.save(out_dir / "group_embeddings.npy", groups)
    check(text_err <= 1e-5, f"text_embeddings table disagrees with text_projection(text_embedding) by {text_err:.3g}")
    check(groups.shape[-1] == hidden, f"group_embeddings width {groups.shape[-1]} != talker hidden {hidden}")
    return {
        "text_embeddings": {"file": text_path.name, "shape": [text_vocab, hidden], "dtype": "float32"},
        "codec_embeddings": {"file": "codec_embeddings.npy", "shape": list(codec.shape), "dtype": "float32"},
        "group_embeddings": {"file": "group_embeddings.npy", "shape": list(groups.shape), "dtype": "float32"},
        "max_abs_err": {"text_embeddings": text_err},
        "seconds": round(time.perf_counter() - t0, 2),
    }


# --------------------------------------------------------------------------------------------------
# validation against the original reference modules


def _reference_talker(talker: Any, past: torch.Tensor, new: torch.Tensor) -> dict[str, Any]:
    """Unpadded single-row reference: prefill `past` [L, H] (if any), then the T `new` tokens [T, H]
    in one call with the cache, through talker.model (MRoPE, HF masks, DynamicCache) + codec_head."""
    from transformers.cache_utils import DynamicCache

    cache = DynamicCache()
    n_past, t = past.shape[0], new.shape[0]
    with torch.no_grad():
        if n_past:
            talker.model(
                inputs_embeds=past[None], attention_mask=torch.ones(1, n_past, dtype=torch.int64),
                position_ids=torch.arange(n_past)[None], past_key_values=cache, use_cache=True,
            )
        layers: list[Any] = list(cache.layers)
        past_kv = [(layer.keys.clone(), layer.values.clone()) for layer in layers] if n_past else None
        out = talker.model(
            inputs_embeds=new[None], attention_mask=torch.ones(1, n_past + t, dtype=torch.int64),
            position_ids=torch.arange(n_past, n_past + t)[None], past_key_values=cache, use_cache=True,
            cache_position=torch.arange(n_past, n_past + t),
        )
        hidden = out.last_hidden_state[:, -1]
        logits = talker.codec_head(hidden)
        layers = list(cache.layers)
    check(len(layers) == talker.config.num_hidden_layers, "reference cache has the wrong number of layers")
    return {
        "logits": logits[0].numpy(),
        "hidden": hidden[0].numpy(),
        "past": past_kv,
        "new": [(layer.keys[0, :, n_past:].numpy(), layer.values[0, :, n_past:].numpy()) for layer in layers],
    }


def _talker_cases() -> list[tuple[str, int, int, int, str]]:
    # (name, batch, past slots P, new tokens T, layout); layouts: full | ragged (padding slots anywhere
    # in the past) | leftpad (left padding inside the new tokens of a batched prefill)
    return [
        ("prefill_b1", 1, 0, 7, "full"),
        ("decode_b1", 1, 5, 1, "full"),
        ("chunk_b1", 1, 9, 4, "full"),
        ("prefill_b3", 3, 0, 6, "full"),
        ("decode_b3", 3, 11, 1, "full"),
        ("chunk_b3", 3, 6, 3, "full"),
        ("ragged_decode_b3", 3, 10, 1, "ragged"),
        ("ragged_chunk_b3", 3, 8, 3, "ragged"),
        ("leftpad_prefill_b2", 2, 0, 6, "leftpad"),
    ]


@dataclass
class TalkerReference:
    """The talker validation inputs with the reference's outputs, computed before ONNX Runtime runs
    so that export can release the PyTorch weights first (see `talker_reference`)."""

    cases: list[tuple[str, dict[str, np.ndarray], list[dict[str, Any]], list[np.ndarray]]]  # name, feed, refs, valid
    seconds: float


def validate_talker(
    tts_model: Any, onnx_path: Path, *, seed: int = 0, tolerances: dict[str, float] | None = None,
    session: Any = None,
) -> dict[str, Any]:
    """ONNX Runtime vs the reference talker (talker.model + codec_head, unpadded single-row runs)
    over prefill (P = 0), decode (T = 1), chunks, batch 1 and 3, ragged past and left-padded prefill.
    Raises ExportError when any output exceeds its tolerance. Returns max_abs_err / cases / seconds."""
    return check_talker(talker_reference(tts_model, seed=seed), onnx_path, tolerances=tolerances, session=session)


def talker_reference(tts_model: Any, *, seed: int = 0) -> TalkerReference:
    """First half of `validate_talker`: the cases' inputs and the PyTorch reference outputs (a few
    MB at 1.7B), so the talker's weights can be freed before the graph is loaded for `check_talker`."""
    with torch_threads(), torch.no_grad():
        return _talker_reference(tts_model, seed)


def _talker_reference(tts_model: Any, seed: int) -> TalkerReference:
    t0 = time.perf_counter()
    talker = _talker(tts_model)
    cfg = talker.config
    layers = cfg.num_hidden_layers
    kvh, hd, hid = cfg.num_key_value_heads, _head_dim(cfg), cfg.hidden_size
    rng = np.random.default_rng(seed)
    cases: list[tuple[str, dict[str, np.ndarray], list[dict[str, Any]], list[np.ndarray]]] = []
    for name, b, p, t, layout in _talker_cases():
        mask = np.ones((b, p + t), dtype=np.int64)
        pos = np.zeros((b, t), dtype=np.int64)
        x = rng.standard_normal((b, t, hid)).astype(np.float32)
        past = [rng.standard_normal((b, kvh, p, hd)).astype(np.float32) * 10 for _ in range(2 * layers)]
        refs = []
        valid_new: list[np.ndarray] = []
        for r in range(b):
            if layout == "ragged":
                n_valid = p - (0, 3, p // 2)[r % 3]  # row 0 full, others with holes
                slots = np.sort(rng.choice(p, size=n_valid, replace=False)) if r else np.arange(p)
            else:
                n_valid, slots = p, np.arange(p)
            lead = 2 if (layout == "leftpad" and r == 1) else 0  # padding tokens at the front of `new`
            mask[r, :p] = 0
            mask[r, slots] = 1
            mask[r, p : p + lead] = 0
            pos[r] = n_valid + np.arange(t) - lead
            pos[r, :lead] = 0
            past_x = torch.from_numpy(rng.standard_normal((n_valid, hid)).astype(np.float32))
            ref = _reference_talker(talker, past_x, torch.from_numpy(x[r, lead:]))
            if ref["past"] is not None:
                for li, (k, v) in enumerate(ref.pop("past")):
                    past[2 * li][r][:, slots] = k[0].numpy()
                    past[2 * li + 1][r][:, slots] = v[0].numpy()
            refs.append(ref)
            valid_new.append(np.arange(lead, t))
        feed: dict[str, np.ndarray] = {"inputs_embeds": x, "attention_mask": mask, "position_ids": pos}
        for li in range(layers):
            feed[f"past_key_{li}"] = past[2 * li]
            feed[f"past_value_{li}"] = past[2 * li + 1]
        cases.append((name, feed, refs, valid_new))
    return TalkerReference(cases, time.perf_counter() - t0)


def check_talker(
    reference: TalkerReference, onnx_path: Path, *, tolerances: dict[str, float] | None = None, session: Any = None
) -> dict[str, Any]:
    """Second half of `validate_talker`: run the graph on the cases and compare with the reference."""
    t0 = time.perf_counter()
    tol = {**TALKER_TOL, **(tolerances or {})}
    sess = session if session is not None else ort_session(Path(onnx_path))
    errs = ErrorTracker()
    for name, feed, refs, valid_new in reference.cases:
        try:
            out = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed), strict=True))
        except Exception as exc:
            b, t = feed["inputs_embeds"].shape[:2]
            p = feed["attention_mask"].shape[1] - t
            raise ExportError(f"talker: onnxruntime failed on case {name} (B={b}, P={p}, T={t}): {exc}") from exc
        for r, ref in enumerate(refs):
            case = f"{name}[row {r}]"
            errs.add("logits", out["logits"][r], ref["logits"], case)
            errs.add("hidden", out["hidden"][r], ref["hidden"], case)
            for li, (k, v) in enumerate(ref["new"]):
                errs.add("new_key", out[f"new_key_{li}"][r][:, valid_new[r]], k, case)
                errs.add("new_value", out[f"new_value_{li}"][r][:, valid_new[r]], v, case)
    errs.enforce(tol, "talker")
    seconds = reference.seconds + time.perf_counter() - t0
    return {"max_abs_err": errs.report(), "cases": len(reference.cases), "validate_seconds": round(seconds, 2)}


def _reference_greedy(talker: Any, hidden: torch.Tensor, code0: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """What the reference talker does per frame with subtalker_dosample=False: code predictor
    `generate`, then the next-input codec embedding sum."""
    groups = talker.config.num_code_groups
    cp = talker.code_predictor
    with torch.no_grad():
        last_id_hidden = talker.model.codec_embedding(code0[:, None])
        result = cp.generate(
            inputs_embeds=torch.cat((hidden[:, None], last_id_hidden), dim=1),
            max_new_tokens=groups - 1, do_sample=False, output_hidden_states=True, return_dict_in_generate=True,
        )
        seq = result.sequences
        summed = torch.cat(
            [last_id_hidden] + [cp.get_input_embeddings()[i](seq[..., i : i + 1]) for i in range(groups - 1)], dim=1
        ).sum(1)
    return seq.numpy(), summed.numpy()


def _reference_logits(talker: Any, hidden: torch.Tensor, code0: torch.Tensor, codes: torch.Tensor) -> np.ndarray:
    """Reference code-predictor logits for every step, teacher-forced with `codes` [B, G-1]."""
    from transformers.cache_utils import DynamicCache

    cp = talker.code_predictor
    groups = talker.config.num_code_groups
    cache = DynamicCache()
    out = []
    with torch.no_grad():
        x = torch.cat((hidden[:, None], talker.model.codec_embedding(code0[:, None])), dim=1)
        res = cp(inputs_embeds=x, past_key_values=cache, use_cache=True)
        out.append(res.logits[:, -1])
        for i in range(1, groups - 1):
            res = cp(input_ids=codes[:, i - 1 : i], past_key_values=cache, use_cache=True, generation_steps=i)
            out.append(res.logits[:, -1])
    return torch.stack(out, 1).numpy()


def _sampling_rows(rng: np.random.Generator, b: int, vocab: int) -> dict[str, np.ndarray]:
    presets = [  # (do_sample, temperature, top_k, top_p)
        (True, 0.9, 50, 1.0),  # the checkpoints' subtalker defaults
        (True, 1.0, 0, 1.0),  # plain sampling
        (True, 0.7, 0, 0.8),  # top-p only
        (True, 1.3, 5, 0.5),  # both
        (False, 0.9, 50, 1.0),  # greedy row inside a sampled batch
        (True, 0.5, vocab, 0.95),  # k >= vocab is off
        (True, 2.0, 1, 1.0),  # top-1
        (True, 0.0, 50, 1.0),  # temperature 0 -> greedy
    ]
    rows = [presets[i % len(presets)] for i in range(b)]
    return {
        "do_sample": np.array([r[0] for r in rows], dtype=bool),
        "temperature": np.array([r[1] for r in rows], dtype=np.float32),
        "top_k": np.array([r[2] for r in rows], dtype=np.int64),
        "top_p": np.array([r[3] for r in rows], dtype=np.float32),
    }


def validate_code_predictor(
    tts_model: Any, onnx_path: Path, *, seed: int = 0, tolerances: dict[str, float] | None = None,
    session: Any = None, check_wrapper: bool = True,
) -> dict[str, Any]:
    """Greedy: ONNX codes == reference `code_predictor.generate(do_sample=False)` codes, bit for bit
    (also for the torch wrapper), codec_embed_sum within tolerance. Sampling: with fixed noise, ONNX
    codes == `numpy_sample` applied to the reference logits (teacher-forced with the ONNX codes)."""
    with torch_threads(), torch.no_grad():
        return _validate_code_predictor(
            tts_model, onnx_path, seed=seed, tolerances=tolerances, session=session, check_wrapper=check_wrapper
        )


def _validate_code_predictor(
    tts_model: Any, onnx_path: Path, *, seed: int, tolerances: dict[str, float] | None, session: Any,
    check_wrapper: bool,
) -> dict[str, Any]:
    t0 = time.perf_counter()
    talker = _talker(tts_model)
    cfg = talker.config
    groups, hid = cfg.num_code_groups, cfg.hidden_size
    codebook = talker.code_predictor.config.vocab_size
    tol = {**CODE_PREDICTOR_TOL, **(tolerances or {})}
    sess = session if session is not None else ort_session(Path(onnx_path))
    rng = np.random.default_rng(seed)
    errs = ErrorTracker()
    wrapper = CodePredictorFrame(tts_model).eval() if check_wrapper else None
    n_cases = 0
    codes_checked = 0
    boundary_ties = 0
    wrapper_agree: list[float] = []

    def run(feed: dict[str, np.ndarray], case: str) -> dict[str, np.ndarray]:
        try:
            return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed), strict=True))
        except Exception as exc:
            raise ExportError(f"code_predictor: onnxruntime failed on case {case}: {exc}") from exc

    # Greedy, batch 1 and 3: bit-identical to the reference generate (ONNX and the torch wrapper).
    for b in (1, 3):
        n_cases += 1
        case = f"greedy_b{b}"
        hidden = rng.standard_normal((b, hid)).astype(np.float32)
        code0 = rng.integers(0, codebook, size=b).astype(np.int64)
        feed: dict[str, np.ndarray] = {
            "hidden": hidden, "code0": code0, "noise": rng.random((b, groups - 1), dtype=np.float32),
            "do_sample": np.zeros(b, dtype=bool), "temperature": np.full(b, 0.9, np.float32),
            "top_k": np.full(b, 50, np.int64), "top_p": np.ones(b, np.float32),
        }
        out = run(feed, case)
        ref_codes, ref_sum = _reference_greedy(talker, torch.from_numpy(hidden), torch.from_numpy(code0))
        if not np.array_equal(out["codes"], ref_codes):
            bad = np.argwhere(out["codes"] != ref_codes)[0]
            raise ExportError(
                f"code_predictor: greedy codes differ from the reference generate ({case}, first at row {bad[0]}, "
                f"group {bad[1] + 1}: onnx {out['codes'][tuple(bad)]} vs reference {ref_codes[tuple(bad)]})"
            )
        codes_checked += ref_codes.size
        errs.add("codec_embed_sum", out["codec_embed_sum"], ref_sum, case)
        ref_logits = _reference_logits(talker, torch.from_numpy(hidden), torch.from_numpy(code0), torch.from_numpy(ref_codes))
        if wrapper is not None:
            with torch.no_grad():
                w_codes, w_sum, w_logits = wrapper(*(torch.from_numpy(feed[k]) for k in feed), return_logits=True)
            if not np.array_equal(w_codes.numpy(), ref_codes):
                raise ExportError(f"code_predictor: the torch wrapper's greedy codes differ from the reference ({case})")
            errs.add("logits", w_logits.numpy(), ref_logits, case + " (torch wrapper)")
            errs.add("wrapper_codec_embed_sum", w_sum.numpy(), ref_sum, case)

    # Sampling: mixed per-row settings, fixed noise, vs numpy_sample on the reference logits.
    for b in (8, 5):
        n_cases += 1
        case = f"sample_b{b}"
        hidden = rng.standard_normal((b, hid)).astype(np.float32)
        code0 = rng.integers(0, codebook, size=b).astype(np.int64)
        knobs = _sampling_rows(rng, b, codebook)
        noise = rng.random((b, groups - 1), dtype=np.float32)
        feed = {"hidden": hidden, "code0": code0, "noise": noise, **knobs}  # same keys, same order
        out = run(feed, case)
        codes = out["codes"]
        ref_logits = _reference_logits(talker, torch.from_numpy(hidden), torch.from_numpy(code0), torch.from_numpy(codes))
        for i in range(groups - 1):
            want = numpy_sample(ref_logits[:, i], noise[:, i], **knobs)
            for r in np.flatnonzero(want != codes[:, i]):
                # Accept only a draw that sits within float noise of a CDF boundary.
                near = {
                    int(numpy_sample(ref_logits[r : r + 1, i], np.array([noise[r, i] + d], np.float32),
                                     **{k: v[r : r + 1] for k, v in knobs.items()})[0])
                    for d in (-1e-5, 1e-5)
                }
                if int(codes[r, i]) not in near:
                    raise ExportError(
                        f"code_predictor: sampled code differs from the numpy sampler ({case}, row {r}, group {i + 1}: "
                        f"onnx {codes[r, i]} vs numpy {want[r]}; knobs "
                        f"{ {k: v[r].item() for k, v in knobs.items()} }, u={noise[r, i]:.6f})"
                    )
                boundary_ties += 1
        codes_checked += codes.size
        groups_sum = talker.model.codec_embedding.weight.detach().numpy()[code0] + sum(
            talker.code_predictor.model.codec_embedding[i].weight.detach().numpy()[codes[:, i]] for i in range(groups - 1)
        )
        errs.add("codec_embed_sum", out["codec_embed_sum"], groups_sum, case)
        if wrapper is not None:
            with torch.no_grad():
                w_codes, w_sum = wrapper(*(torch.from_numpy(feed[k]) for k in feed))
            # The wrapper samples from its own logits: equal codes are expected but not mandated.
            wrapper_agree.append(float((w_codes.numpy() == codes).mean()))
    tol.setdefault("wrapper_codec_embed_sum", 1e-4)
    errs.enforce(tol, "code_predictor")
    return {
        "max_abs_err": errs.report(),
        "cases": n_cases,
        "codes_checked": codes_checked,
        "boundary_ties": boundary_ties,
        "wrapper_sampled_code_agreement": min(wrapper_agree) if wrapper_agree else None,
        "validate_seconds": round(time.perf_counter() - t0, 2),
    }


def validate_int8(
    tts_model: Any, fp32_path: Path, int8_path: Path, *, seed: int = 0, min_agreement: float = 0.0
) -> dict[str, Any]:
    """Run an int8 graph next to its fp32 original on random inputs and report how close it stays.

    talker: greedy code0 (argmax of logits) agreement and logits error over decode/prefill cases;
    code_predictor: greedy code agreement and codec_embed_sum error. int8 is lossy, so this only
    raises when the graph does not run or agreement falls below `min_agreement`.
    """
    import onnx

    t0 = time.perf_counter()
    meta = {p.key: p.value for p in onnx.load(str(fp32_path), load_external_data=False).metadata_props}
    graph = meta.get("graph", Path(fp32_path).stem)
    fp32, int8 = ort_session(Path(fp32_path)), ort_session(Path(int8_path))
    rng = np.random.default_rng(seed)
    cfg = _talker(tts_model).config
    agree: list[np.ndarray] = []
    err = 0.0
    if graph == "talker":
        kvh, hd = cfg.num_key_value_heads, _head_dim(cfg)
        for b, p, t in ((4, 0, 8), (8, 16, 1), (8, 40, 1)):
            feed: dict[str, np.ndarray] = {
                "inputs_embeds": rng.standard_normal((b, t, cfg.hidden_size)).astype(np.float32),
                "attention_mask": np.ones((b, p + t), np.int64),
                "position_ids": np.tile(np.arange(p, p + t), (b, 1)),
            }
            for li in range(cfg.num_hidden_layers):
                feed[f"past_key_{li}"] = rng.standard_normal((b, kvh, p, hd)).astype(np.float32)
                feed[f"past_value_{li}"] = rng.standard_normal((b, kvh, p, hd)).astype(np.float32)
            try:
                a, q = fp32.run(["logits"], feed)[0], int8.run(["logits"], feed)[0]
            except Exception as exc:
                raise ExportError(f"int8 talker does not run: {exc}") from exc
            agree.append(a.argmax(-1) == q.argmax(-1))
            err = max(err, max_abs(a, q))
        name = "logits"
    elif graph == "code_predictor":
        g = cfg.num_code_groups - 1
        codebook = tts_model.talker.code_predictor.config.vocab_size
        for b in (8, 8):
            feed = {
                "hidden": rng.standard_normal((b, cfg.hidden_size)).astype(np.float32),
                "code0": rng.integers(0, codebook, size=b).astype(np.int64),
                "noise": rng.random((b, g), dtype=np.float32), "do_sample": np.zeros(b, bool),
                "temperature": np.ones(b, np.float32), "top_k": np.zeros(b, np.int64), "top_p": np.ones(b, np.float32),
            }
            try:
                a_codes, a_sum = fp32.run(None, feed)
                q_codes, q_sum = int8.run(None, feed)
            except Exception as exc:
                raise ExportError(f"int8 code_predictor does not run: {exc}") from exc
            agree.append((a_codes == q_codes).reshape(-1))
            err = max(err, max_abs(a_sum, q_sum))
        name = "codec_embed_sum"
    else:
        raise ExportError(f"validate_int8: unknown graph {graph!r}")
    agreement = float(np.concatenate([np.ravel(x) for x in agree]).mean())
    check(agreement >= min_agreement, f"int8 {graph}: greedy agreement {agreement:.3f} < {min_agreement}")
    return {
        "file": Path(int8_path).name,
        "bytes": file_size(Path(int8_path)),
        "greedy_agreement": round(agreement, 4),
        "max_abs_err": {name: float(f"{err:.3g}")},
        "validate_seconds": round(time.perf_counter() - t0, 2),
    }
