"""MOSS-TTS-Nano's language model as the torch modules its two step graphs are traced from, written from the
architecture (ttscore/contract/moss_tts_nano/graphs.py has the whole picture):

- `GlobalStep`: the GPT-2-style global transformer (pre-LayerNorm blocks, fused `c_attn` q/k/v Linear with bias,
  `c_proj`, gelu_new MLP `fc_in`/`fc_out`, final `ln_f`; interleaved RoPE on q and k, no absolute positions) over
  an explicit past: (inputs_embeds, attention_mask, position_ids, *past K/V) -> (hidden of the last position,
  *new K/V).
- `LocalStep`: the one-layer local transformer of the same shape over its own past (positions past..past+T-1, no
  mask), with the tied heads: (inputs_embeds, audio_head, *past K/V) -> (text_logits [B, 2] of the first new
  position over the (slot, audio_end) rows of `wte`, audio_logits [B, C] of the last new position p over
  `audio_head`, which the caller gives: `audio_embeddings[p-1]` (`head`), *new K/V).

Attention keeps K as [B, H, S, hd] and multiplies by one explicit permute of it (never a transpose of a
transpose: torch's ONNX export has been seen to fuse such a pair on the K path into the wrong permutation).
`Tensors` reads a checkpoint's weights (safetensors, or pytorch_model.bin with weights_only) as float32;
`embed_rows` is the prompt rows' embedding in the reference's order; `greedy_frames` decodes with the modules
eagerly (make-tiny's stop-row search and the export's whole-frame check).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ttscore.contract.errors import CheckpointError
from ttscore.contract.moss_tts_nano import graphs as spec
from ttscore.runtime.checkpoint_kit import load_torch_state
from ttscore.runtime.families.moss_tts_nano.checkpoint import (
    TORCH_WEIGHTS,
    WEIGHTS,
    MossConfig,
    tied_heads,
    weights_file,
)


def gelu_new(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def rope_tables(position_ids: torch.Tensor, head_dim: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [B, T, 1, hd] of interleaved RoPE (each frequency on an adjacent pair of channels)."""
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    freqs = position_ids.to(torch.float32)[..., None] * inv_freq
    cos, sin = torch.cos(freqs), torch.sin(freqs)
    return (torch.stack((cos, cos), dim=-1).flatten(-2)[:, :, None, :],
            torch.stack((sin, sin), dim=-1).flatten(-2)[:, :, None, :])


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Interleaved rotation of x [B, T, H, hd]: pairs (x_2i, x_2i+1) -> (-x_2i+1, x_2i), then x cos + rot sin."""
    pairs = x.unflatten(-1, (x.shape[-1] // 2, 2))
    rot = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
    return x * cos + rot * sin


def head_logits(head: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """Logits [B, C] of hidden states h [B, D] over a tied head [C, D] fed to the graph: computed as head @ h^T and
    the small [C, B] result transposed, so ONNX Runtime streams the head as it lies (h @ head^T made it repack the
    3 MB head, transposed, every call: the largest kernel of a batch-8 local step)."""
    return torch.matmul(head, h.permute(1, 0)).permute(1, 0)


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.dim, self.heads, self.head_dim = dim, heads, dim // heads
        self.scale = self.head_dim ** -0.5
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, bias: torch.Tensor | None,
                past_k: torch.Tensor, past_v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, t, _ = x.shape
        q, k, v = self.c_attn(x).split(self.dim, dim=-1)
        q = rope(q.reshape(b, t, self.heads, self.head_dim), cos, sin).permute(0, 2, 1, 3)
        k = rope(k.reshape(b, t, self.heads, self.head_dim), cos, sin).permute(0, 2, 1, 3)
        v = v.reshape(b, t, self.heads, self.head_dim).permute(0, 2, 1, 3)
        # One softmax over [past, new] keys computed in its two parts, so the past (the K/V arena's rows, bound in
        # place) is read where it lies and never copied into a concatenation (at 8 rows x 180 positions that copy
        # was a third of a decode step). The maximum is taken over the past's scores and the new ones' maximum
        # together: defined for an empty past too.
        qs = q * self.scale
        s_old = torch.matmul(qs, past_k.permute(0, 1, 3, 2))  # [B, H, T, P]
        s_new = torch.matmul(qs, k.permute(0, 1, 3, 2))  # [B, H, T, T]
        if bias is not None:
            p = past_k.shape[2]
            s_old, s_new = s_old + bias[..., :p], s_new + bias[..., p:]
        top = torch.cat((s_old, s_new.amax(dim=-1, keepdim=True)), dim=-1).amax(dim=-1, keepdim=True)
        e_old, e_new = torch.exp(s_old - top), torch.exp(s_new - top)
        out = (torch.matmul(e_old, past_v) + torch.matmul(e_new, v)) / (e_old.sum(dim=-1, keepdim=True)
                                                                       + e_new.sum(dim=-1, keepdim=True))
        out = out.permute(0, 2, 1, 3).reshape(b, t, self.dim)
        return self.c_proj(out), k, v


class MLP(nn.Module):
    def __init__(self, dim: int, inner: int) -> None:
        super().__init__()
        self.fc_in = nn.Linear(dim, inner)
        self.fc_out = nn.Linear(inner, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc_out(gelu_new(self.fc_in(x)))


class Block(nn.Module):
    def __init__(self, c: MossConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.dim, eps=c.eps)
        self.attn = Attention(c.dim, c.heads)
        self.ln_2 = nn.LayerNorm(c.dim, eps=c.eps)
        self.mlp = MLP(c.dim, c.inner)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, bias: torch.Tensor | None,
                past_k: torch.Tensor, past_v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        a, k, v = self.attn(self.ln_1(x), cos, sin, bias, past_k, past_v)
        x = x + a
        return x + self.mlp(self.ln_2(x)), k, v


class _Stack(nn.Module):
    def __init__(self, c: MossConfig, layers: int) -> None:
        super().__init__()
        self.c = c
        self.h = nn.ModuleList(Block(c) for _ in range(layers))
        self.ln_f = nn.LayerNorm(c.dim, eps=c.eps)

    def run(self, x: torch.Tensor, position_ids: torch.Tensor, bias: torch.Tensor | None,
            past: Sequence[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
        cos, sin = rope_tables(position_ids, self.c.head_dim, self.c.rope_base)
        new: list[torch.Tensor] = []
        for i, block in enumerate(self.h):
            x, k, v = block(x, cos, sin, bias, past[2 * i], past[2 * i + 1])
            new += [k, v]
        return self.ln_f(x), new


class GlobalStep(_Stack):
    """(inputs_embeds [B, T, D], attention_mask [B, P + T], position_ids [B, T], *past) -> (hidden [B, D], *new)."""

    def __init__(self, c: MossConfig) -> None:
        super().__init__(c, c.layers)

    def forward(self, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                *past: torch.Tensor) -> tuple[torch.Tensor, ...]:
        t = inputs_embeds.shape[1]
        total = attention_mask.shape[1]
        keys = torch.arange(total)
        queries = torch.arange(t) + (total - t)
        allowed = (keys[None, :] <= queries[:, None])[None, None] & (attention_mask != 0)[:, None, None, :]
        bias = torch.where(allowed, torch.zeros((), dtype=torch.float32),
                           torch.full((), torch.finfo(torch.float32).min))
        h, new = self.run(inputs_embeds, position_ids, bias, past)
        return (h[:, -1], *new)


class LocalStep(_Stack):
    """(inputs_embeds [B, T, D], audio_head [C, D], *past) -> (text_logits [B, 2], audio_logits [B, C], *new)."""

    def __init__(self, c: MossConfig) -> None:
        super().__init__(c, c.local_layers)
        self.stop_rows: torch.Tensor
        self.audio_heads: torch.Tensor
        self.register_buffer("stop_rows", torch.zeros(len(spec.STOP_CANDIDATES), c.dim))
        self.register_buffer("audio_heads", torch.zeros(c.n_vq, c.codebook_size, c.dim))

    def head(self, last_position: int) -> torch.Tensor:
        """The audio head local position `last_position` is multiplied by (spec.head_codebook), [C, D]."""
        return self.audio_heads[spec.head_codebook(last_position)]

    def forward(self, inputs_embeds: torch.Tensor, audio_head: torch.Tensor, *past: torch.Tensor
                ) -> tuple[torch.Tensor, ...]:
        t = inputs_embeds.shape[1]
        start = past[0].shape[2]
        positions = torch.arange(t) + start  # [T]
        bias = None
        if t > 1:  # causal among the new positions (the past is all visible)
            keys = torch.arange(start + t)
            allowed = keys[None, :] <= positions[:, None]
            bias = torch.where(allowed, torch.zeros((), dtype=torch.float32),
                               torch.full((), torch.finfo(torch.float32).min))[None, None]
        h, new = self.run(inputs_embeds, positions[None].expand(inputs_embeds.shape[0], t), bias, past)
        text = torch.matmul(h[:, 0], self.stop_rows.permute(1, 0))
        audio = head_logits(audio_head, h[:, -1])
        return (text, audio, *new)


class LocalCodeStep(nn.Module):
    """The `local_code_step` graph (ttscore/contract/moss_tts_nano/graphs.py): one new position of `local`'s
    transformer (its modules, shared) over a fixed-size cache, (inputs_embeds [B, D], position [1], audio_head
    [C, D], *cache [B, H, LOCAL_CACHE, hd]) -> (audio_logits [B, C], *new [B, H, 1, hd]).

    The same arithmetic as `LocalStep` at one position, written so that every shape but the batch is a constant of
    the graph (no Shape/Gather/Concat per call): reshapes by constant sizes with the batch as -1 (one position, so
    [B, H*hd] -> [B, H, 1, hd] needs no transpose), the RoPE tables of the frame's positions a buffer read at
    `position` (the values `rope_tables` gives), the interleaved rotation as a swap of each pair times a signed sine
    ((-x1) s == x1 (-s) exactly), the cache's slots at and after `position` masked as `LocalStep` masks (their exp
    is exactly 0, so they add exact zeros)."""

    rope_cos: torch.Tensor
    rope_sin: torch.Tensor
    slots: torch.Tensor
    h: nn.ModuleList

    def __init__(self, local: LocalStep) -> None:
        super().__init__()
        c = local.c
        self.c, self.h, self.ln_f = c, local.h, local.ln_f
        cos, sin = rope_tables(torch.arange(spec.LOCAL_POSITIONS)[None], c.head_dim, c.rope_base)
        sign = torch.tensor([-1.0, 1.0]).repeat(c.head_dim // 2)
        self.register_buffer("rope_cos", cos[0, :, 0].clone())  # [LOCAL_POSITIONS, hd]
        self.register_buffer("rope_sin", (sin[0, :, 0] * sign).clone())  # the pair's first channel negated
        self.register_buffer("slots", torch.arange(spec.LOCAL_CACHE))

    def _attention(self, attn: Attention, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                   bias: torch.Tensor, cache_k: torch.Tensor, cache_v: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h, hd = attn.heads, attn.head_dim
        q, k, v = attn.c_attn(x).split(attn.dim, dim=-1)  # [B, D] each

        def rotate(t: torch.Tensor) -> torch.Tensor:
            pairs = t.reshape(-1, h, hd // 2, 2)
            return (t.reshape(-1, h, hd // 2, 2) * cos + pairs[..., [1, 0]] * sin).reshape(-1, h, 1, hd)

        q, k = rotate(q), rotate(k)
        v = v.reshape(-1, h, 1, hd)
        qs = q * attn.scale
        s_old = torch.matmul(qs, cache_k.permute(0, 1, 3, 2)) + bias  # [B, H, 1, S]
        s_new = torch.matmul(qs, k.reshape(-1, h, hd, 1))  # [B, H, 1, 1]
        top = torch.maximum(s_old.amax(dim=-1, keepdim=True), s_new)
        e_old, e_new = torch.exp(s_old - top), torch.exp(s_new - top)
        out = (torch.matmul(e_old, cache_v) + e_new * v) / (e_old.sum(dim=-1, keepdim=True) + e_new)
        return attn.c_proj(out.reshape(-1, attn.dim)), k, v

    def forward(self, inputs_embeds: torch.Tensor, position: torch.Tensor, audio_head: torch.Tensor,
                *cache: torch.Tensor) -> tuple[torch.Tensor, ...]:
        half = self.c.head_dim // 2
        cos = self.rope_cos[position].reshape(1, 1, half, 2)
        sin = self.rope_sin[position].reshape(1, 1, half, 2)
        bias = torch.where(self.slots < position, torch.zeros((), dtype=torch.float32),
                           torch.full((), torch.finfo(torch.float32).min))
        x = inputs_embeds
        new: list[torch.Tensor] = []
        for i, block in enumerate(self.h):
            assert isinstance(block, Block)
            a, k, v = self._attention(block.attn, block.ln_1(x), cos, sin, bias, cache[2 * i], cache[2 * i + 1])
            x = x + a
            x = x + block.mlp(block.ln_2(x))
            new += [k, v]
        audio = head_logits(audio_head, self.ln_f(x))
        return (audio, *new)


# --- weights --------------------------------------------------------------------------------------------------


class Tensors:
    """A checkpoint's weights by their stored names, as float32 torch tensors: safetensors read one tensor at a time,
    pytorch_model.bin loaded once with weights_only."""

    def __init__(self, checkpoint: Path) -> None:
        self.root = Path(checkpoint)
        path = weights_file(self.root)
        self.state: dict[str, Any] | None = None
        self.files: Any = None
        if path.name == TORCH_WEIGHTS:
            self.state = load_torch_state(path)
        else:
            from export.weights import CheckpointTensors

            self.files = CheckpointTensors(self.root, WEIGHTS)

    def get(self, name: str) -> torch.Tensor:
        if self.state is not None:
            if name not in self.state:
                raise CheckpointError(f"{self.root}: {TORCH_WEIGHTS} has no tensor {name}")
            return self.state[name].to(torch.float32)
        t: torch.Tensor = self.files.get(name)
        return t

    def has(self, name: str) -> bool:
        return name in (self.state if self.state is not None else self.files.files)

    def check_ties(self, c: MossConfig) -> None:
        """Each stored head copy equals the tensor it is tied to (the model reads the tied one)."""
        for head, tied in tied_heads(c).items():
            if self.has(head) and not torch.equal(self.get(head), self.get(tied)):
                raise CheckpointError(f"{self.root}: {head} differs from {tied}, which it is tied to")


def load_stack(module: _Stack, tensors: Tensors, prefix: str) -> None:
    state = {name: tensors.get(f"{prefix}.{name}") for name in module.state_dict()
             if name not in ("stop_rows", "audio_heads")}
    if isinstance(module, LocalStep):
        wte = tensors.get("transformer.wte.weight")
        state["stop_rows"] = wte[list(spec.STOP_CANDIDATES)].clone()
        state["audio_heads"] = torch.stack([tensors.get(f"audio_embeddings.{k}.weight")
                                            for k in range(module.c.n_vq)])
    module.load_state_dict(state, strict=True)


def global_step(c: MossConfig, tensors: Tensors) -> GlobalStep:
    m = GlobalStep(c).eval()
    load_stack(m, tensors, "transformer")
    return m


def local_step(c: MossConfig, tensors: Tensors) -> LocalStep:
    m = LocalStep(c).eval()
    load_stack(m, tensors, "local_transformer")
    return m


def tables(c: MossConfig, tensors: Tensors) -> dict[str, np.ndarray]:
    """The runtime's tables: wte [V, D] and the codebook embeddings [N_VQ, C, D], float32."""
    return {spec.WTE: tensors.get("transformer.wte.weight").numpy(),
            spec.AUDIO_EMBEDDINGS: torch.stack([tensors.get(f"audio_embeddings.{k}.weight")
                                                for k in range(c.n_vq)]).numpy()}


def embed_rows(rows: np.ndarray, wte: np.ndarray, audio: np.ndarray, pad: int) -> np.ndarray:
    """Prompt rows [..., 17] -> embeddings [..., D] in the reference's order: wte(col 0), then + emb_k(c_k) for
    k = 0..15, a pad column adding nothing; float32 throughout."""
    out = wte[rows[..., 0]].astype(np.float32)
    for k in range(audio.shape[0]):
        ids = rows[..., k + 1]
        valid = ids != pad
        out = out + audio[k][np.where(valid, ids, 0)] * valid[..., None].astype(np.float32)
    return out


# --- eager decoding --------------------------------------------------------------------------------------------


def greedy_frames(g: GlobalStep, local: LocalStep, tabs: dict[str, np.ndarray], rows: np.ndarray, max_frames: int,
                  penalty: float = 1.0) -> np.ndarray:
    """Greedy frames [n, 16] of one prompt (rows [T, 17]) with the modules run eagerly, each step over its past."""
    c = g.c
    wte, audio = tabs[spec.WTE], tabs[spec.AUDIO_EMBEDDINGS]
    empty = [torch.zeros(1, c.heads, 0, c.head_dim) for _ in range(2 * c.layers)]
    lempty = [torch.zeros(1, c.heads, 0, c.head_dim) for _ in range(2 * c.local_layers)]
    past = empty
    frames: list[np.ndarray] = []
    x = torch.from_numpy(embed_rows(rows[None], wte, audio, c.audio_pad_id))
    n = 0
    with torch.inference_mode():
        for _ in range(max_frames):
            t = x.shape[1]
            out = g(x, torch.ones(1, n + t, dtype=torch.int64), torch.arange(n, n + t)[None], *past)
            past = [torch.cat((a, b), dim=2) for a, b in zip(past, out[1:], strict=True)]
            n += t
            lout = local(out[0][:, None], local.head(0), *lempty)
            if int(torch.argmax(lout[0][0])) != 0:  # 0: the slot (continue); ties go to it
                break
            lpast = list(lout[2:])
            inp = torch.from_numpy(wte[spec.AUDIO_ASSISTANT_SLOT_ID])[None, None]
            codes: list[int] = []
            for k in range(c.n_vq):
                lout = local(inp, local.head(k + 1), *lpast)
                lpast = [torch.cat((a, b), dim=2) for a, b in zip(lpast, lout[2:], strict=True)]
                logits = lout[1][0].numpy().copy()
                if penalty != 1.0 and frames:
                    seen = np.unique(np.array([f[k] for f in frames]))
                    s = logits[seen]
                    logits[seen] = np.where(s < 0, s * penalty, s / penalty)
                code = int(np.argmax(logits))
                codes.append(code)
                inp = torch.from_numpy(audio[k][code])[None, None]
            frames.append(np.array(codes, np.int64))
            row = np.array([[spec.AUDIO_ASSISTANT_SLOT_ID, *codes]], np.int64)
            x = torch.from_numpy(embed_rows(row[None], wte, audio, c.audio_pad_id))
    return np.stack(frames) if frames else np.zeros((0, c.n_vq), np.int64)
