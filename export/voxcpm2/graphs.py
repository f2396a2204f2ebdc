"""Torch wrappers around the VoxCPM2 reference modules, shaped as the exported graphs.

Each wrapper reads the reference module's own weights and buffers (nothing is re-initialized) and
recomputes its forward with explicit tensors: per-layer K/V in and out, attention masks built from
the inputs, RoPE from the reference's own cos/sin tables, weight norm folded once. The reference
modules themselves do not export: SDPA with `enable_gqa`, a static KV cache written in place,
TorchScript `snake`, weight-norm hooks, and a stateful streaming decoder patched at run time.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from export.blocks import apply_rope, masked_attention, snake

NEG = torch.finfo(torch.float32).min  # masked logits (a fully masked padding row stays finite)


def _layer(layer: Any, x: torch.Tensor, cos: torch.Tensor | None, sin: torch.Tensor | None, mask: torch.Tensor,
           past_k: torch.Tensor | None, past_v: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One MiniCPM decoder layer over new positions x [B, T, H]; mask [B, 1, T, past + T] (True = attend)."""
    attn = layer.self_attn
    b, t, _ = x.shape
    nh, kvh, hd = attn.num_heads, attn.num_key_value_heads, attn.head_dim
    h = layer.input_layernorm(x)
    q = attn.q_proj(h).view(b, t, nh, hd).transpose(1, 2)
    k = attn.k_proj(h).view(b, t, kvh, hd).transpose(1, 2)
    v = attn.v_proj(h).view(b, t, kvh, hd).transpose(1, 2)
    if cos is not None and sin is not None:
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    keys = k if past_k is None else torch.cat([past_k, k], dim=2)
    values = v if past_v is None else torch.cat([past_v, v], dim=2)
    out = attn.o_proj(masked_attention(q, keys, values, mask, NEG, nh, kvh, hd))
    scale = layer.scale_depth / math.sqrt(layer.num_hidden_layers) if layer.use_mup else 1.0
    x = x + out * scale if layer.use_mup else x + out
    m = layer.mlp(layer.post_attention_layernorm(x))
    x = x + m * scale if layer.use_mup else x + m
    return x, k, v


def _rope(stack: Any, positions: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """cos/sin [B, 1, T, hd] from the reference's cached tables (LongRoPE factors and scaling included)."""
    if stack.rope_emb is None:
        return None, None
    return stack.rope_emb.cos_cached[positions].unsqueeze(1), stack.rope_emb.sin_cached[positions].unsqueeze(1)


def _bidirectional(x: torch.Tensor, stack: Any) -> torch.Tensor:
    """A non-causal MiniCPM stack over x [N, S, H] (local encoder, LocDiT), positions 0..S-1."""
    n, s, _ = x.shape
    pos = torch.arange(s, dtype=torch.long).unsqueeze(0).expand(n, s)
    cos, sin = _rope(stack, pos)
    mask = torch.ones(n, 1, s, s, dtype=torch.bool)
    for layer in stack.layers:
        x, _, _ = _layer(layer, x, cos, sin, mask, None, None)
    out: torch.Tensor = stack.norm(x)
    return out


class LMStep(nn.Module):
    """Base or residual LM: prefill (T = chunk) and decode (T = 1) with explicit per-layer K/V."""

    def __init__(self, stack: Any) -> None:
        super().__init__()
        self.stack = stack

    def forward(self, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor, *rest: torch.Tensor
                ) -> tuple[torch.Tensor, ...]:
        """rest: position_ids (only with RoPE), then past key/value per layer, each cut here to the mask's past
        (`past_cut_to_mask`, ttscore.contract.kv): a longer past (the runtime's arena rows at their capacity)
        attends over exactly the slots and values of one fed cut to P, so the output keeps its bits."""
        if self.stack.rope_emb is not None:
            position_ids, past = rest[0], rest[1:]
        else:
            position_ids, past = None, rest
        t = inputs_embeds.shape[1]
        total = attention_mask.shape[1]
        p = total - t
        past = tuple(kv[:, :, :p] for kv in past)  # a Slice whose end comes from the shapes
        valid = attention_mask.bool()[:, None, None, :]  # [B, 1, 1, P + T]
        qi = torch.arange(t).view(1, 1, t, 1) + p
        kj = torch.arange(total).view(1, 1, 1, total)
        mask = valid & (kj <= qi)
        cos, sin = _rope(self.stack, position_ids) if position_ids is not None else (None, None)
        x = inputs_embeds
        news: list[torch.Tensor] = []
        for i, layer in enumerate(self.stack.layers):
            x, k, v = _layer(layer, x, cos, sin, mask, past[2 * i], past[2 * i + 1])
            news += [k, v]
        return (self.stack.norm(x), *news)


class LocalEncoder(nn.Module):
    """feats [N, P, D] -> enc_to_lm_proj(feat_encoder(feats)) [N, H]."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.enc = model.feat_encoder
        self.proj = model.enc_to_lm_proj

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        x = self.enc.in_proj(feats)
        n = x.shape[0]
        cls = self.enc.special_token.reshape(1, 1, -1).expand(n, 1, x.shape[-1])
        out = _bidirectional(torch.cat([cls, x], dim=1), self.enc.encoder)
        result: torch.Tensor = self.proj(out[:, 0, :])
        return result


class Bridge(nn.Module):
    def __init__(self, model: Any) -> None:
        super().__init__()
        self.fsq = model.fsq_layer
        self.fusion = model.fusion_concat_proj

    def forward(self, lm_out: torch.Tensor, feat_embeds: torch.Tensor, audio_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q = self.fsq.out_proj(torch.round(torch.tanh(self.fsq.in_proj(lm_out)) * self.fsq.scale) / self.fsq.scale)
        m = audio_mask.unsqueeze(-1)
        lm_hidden = torch.where(m, q, lm_out)
        audio = torch.where(m, feat_embeds, torch.zeros_like(feat_embeds))
        return lm_hidden, self.fusion(torch.cat([lm_hidden, audio], dim=-1))


class Heads(nn.Module):
    def __init__(self, model: Any) -> None:
        super().__init__()
        self.lm_to_dit = model.lm_to_dit_proj
        self.res_to_dit = model.res_to_dit_proj
        self.stop_proj = model.stop_proj
        self.stop_head = model.stop_head

    def forward(self, lm_hidden: torch.Tensor, residual_hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mu = torch.cat([self.lm_to_dit(lm_hidden), self.res_to_dit(residual_hidden)], dim=-1)
        return mu, self.stop_head(F.silu(self.stop_proj(lm_hidden)))


class LocDiTStep(nn.Module):
    """The guided velocity of one Euler step (see ttscore.contract.voxcpm2.locdit_spec)."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.est = model.feat_decoder.estimator
        self.mean_mode = bool(model.feat_decoder.mean_mode)

    def _estimate(self, x: torch.Tensor, mu: torch.Tensor, t: torch.Tensor, cond: torch.Tensor, dt: torch.Tensor) -> torch.Tensor:
        e = self.est
        h = e.in_proj(x.transpose(1, 2))
        c = e.cond_proj(cond.transpose(1, 2))
        temb = e.time_mlp(e.time_embeddings(t)) + e.delta_time_mlp(e.time_embeddings(dt))
        mu_tokens = mu.view(h.shape[0], -1, h.shape[-1])
        seq = torch.cat([mu_tokens, temb.unsqueeze(1), c, h], dim=1)
        out = _bidirectional(seq, e.decoder)
        start = mu_tokens.shape[1] + 1 + c.shape[1]
        result: torch.Tensor = e.out_proj(out[:, start:, :]).transpose(1, 2)
        return result

    def forward(self, x: torch.Tensor, mu: torch.Tensor, cond: torch.Tensor, t: torch.Tensor, dt: torch.Tensor,
                cfg_value: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        dt_in = dt if self.mean_mode else dt * 0.0
        v = self._estimate(
            torch.cat([x, x]), torch.cat([mu, torch.zeros_like(mu)]), torch.cat([t, t]), torch.cat([cond, cond]),
            torch.cat([dt_in, dt_in]),
        )
        pos, neg = v[:b], v[b:]
        pf, nf = pos.reshape(b, -1), neg.reshape(b, -1)
        st = (torch.sum(pf * nf, dim=1, keepdim=True) / (torch.sum(nf**2, dim=1, keepdim=True) + 1e-8)).view(b, 1, 1)
        return neg * st + cfg_value.view(b, 1, 1) * (pos - neg * st)


# ---- AudioVAE -----------------------------------------------------------------------------------
def _conv_weight(conv: Any) -> torch.Tensor:
    """The conv's effective weight (weight norm applied once, exactly as its forward hook computes it)."""
    if hasattr(conv, "weight_g"):
        return torch._weight_norm(conv.weight_v, conv.weight_g, 0).detach()
    return conv.weight.detach()


def _bias(conv: Any) -> torch.Tensor | None:
    return None if conv.bias is None else conv.bias.detach()


class VaeEncoder(nn.Module):
    """16 kHz audio [B, S] -> latent means [B, D, S / hop] (the reference's `encode` after padding)."""

    def __init__(self, vae: Any) -> None:
        super().__init__()
        self.encoder = vae.encoder
        self.ops = _plan(self.encoder.block, stateful=False)
        self.mu_w = _conv_weight(self.encoder.fc_mu)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        x = audio.unsqueeze(1)
        x, _ = _run(self.ops, x, None, stateful=False)
        pad = self.encoder.fc_mu._CausalConv1d__padding * 2 - self.encoder.fc_mu._CausalConv1d__output_padding
        fc = self.encoder.fc_mu
        return F.conv1d(F.pad(x, (pad, 0)), self.mu_w, fc.bias, fc.stride, 0, fc.dilation, fc.groups)


def _plan(module: Any, stateful: bool) -> list[tuple[str, Any]]:
    """Flatten a causal conv network into (kind, payload) ops in execution order."""
    kind = type(module).__name__
    if isinstance(module, nn.Sequential):
        return [op for m in module for op in _plan(m, stateful)]
    if kind == "CausalResidualUnit":
        return [("residual_begin", None), *_plan(module.block, stateful), ("residual_end", None)]
    if kind in ("CausalEncoderBlock", "CausalDecoderBlock"):
        return _plan(module.block, stateful)
    if kind == "Snake1d":
        return [("snake", module.alpha.detach())]
    if kind == "Tanh":
        return [("tanh", None)]
    if kind == "CausalConv1d":
        pad = module._CausalConv1d__padding * 2 - module._CausalConv1d__output_padding
        return [("conv", (module, _conv_weight(module), _bias(module), pad))]
    if kind == "CausalTransposeConv1d":
        trim = module._CausalTransposeConv1d__padding * 2 - module._CausalTransposeConv1d__output_padding
        return [("tconv", (module, _conv_weight(module), _bias(module), trim))]
    raise NotImplementedError(f"AudioVAE export: no rule for {kind}")


def _run(ops: list[tuple[str, Any]], x: torch.Tensor, state: list[torch.Tensor] | None,
         stateful: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Run the ops; with `stateful`, `state` holds each conv's left context and is replaced by the new one."""
    stack: list[torch.Tensor] = []
    new_state: list[torch.Tensor] = []
    si = 0
    for kind, payload in ops:
        if kind == "residual_begin":
            stack.append(x)
        elif kind == "residual_end":
            x = stack.pop() + x
        elif kind == "snake":
            x = snake(x, payload)
        elif kind == "tanh":
            x = torch.tanh(x)
        elif kind == "conv":
            mod, w, bias, pad = payload
            if stateful and pad > 0:
                assert state is not None
                xin = torch.cat([state[si], x], dim=-1)
                si += 1
                new_state.append(xin[..., xin.shape[-1] - pad:])
            else:
                xin = F.pad(x, (pad, 0))
            x = F.conv1d(xin, w, bias, mod.stride, 0, mod.dilation, mod.groups)
        elif kind == "tconv":
            mod, w, bias, trim = payload
            s = int(mod.stride[0])
            ctx = (int(mod.kernel_size[0]) - 1) // s
            if stateful and ctx > 0:
                assert state is not None
                xin = torch.cat([state[si], x], dim=-1)
                si += 1
                new_state.append(xin[..., xin.shape[-1] - ctx:])
                y = F.conv_transpose1d(xin, w, bias, mod.stride, 0, 0, mod.groups, mod.dilation)
                x = y[..., ctx * s: y.shape[-1] - trim]
            else:
                y = F.conv_transpose1d(x, w, bias, mod.stride, 0, 0, mod.groups, mod.dilation)
                x = y[..., : y.shape[-1] - trim]
        else:
            raise AssertionError(kind)
    return x, new_state


class VaeDecoderStream(nn.Module):
    """(latents [B, D, T], state [B, S]) -> (pcm [B, T * hop], new_state): the exact streaming decoder.

    The sample-rate condition (a per-channel scale and bias before each decoder block) is fixed at
    the output rate, so it is folded into constants."""

    def __init__(self, vae: Any) -> None:
        super().__init__()
        dec = vae.decoder
        self.steps: list[tuple[tuple[torch.Tensor, torch.Tensor] | None, list[tuple[str, Any]]]] = []
        bucket = None
        if dec.sr_bin_boundaries is not None:
            sr = torch.tensor([vae.out_sample_rate], dtype=torch.int32)
            bucket = int(torch.bucketize(sr, dec.sr_bin_boundaries)[0])
        layers = dec.model if isinstance(dec.model, nn.ModuleList) else list(dec.model)
        conds = list(dec.sr_cond_model) if bucket is not None else [None] * len(layers)
        for layer, cond in zip(layers, conds, strict=True):
            affine = None
            if cond is not None:
                if cond.cond_type not in ("scale_bias", "scale_bias_init") or not isinstance(cond.out_layer, nn.Identity):
                    raise NotImplementedError(f"AudioVAE export: sample-rate condition {cond.cond_type}")
                affine = (cond.scale_embed.weight[bucket].detach().view(1, -1, 1),
                          cond.bias_embed.weight[bucket].detach().view(1, -1, 1))
            self.steps.append((affine, _plan(layer, stateful=True)))
        self.layout = self._layout(int(vae.latent_dim))
        self.state_size = sum(c * n for c, n in self.layout)

    def _layout(self, latent_dim: int) -> list[tuple[int, int]]:
        """(channels, frames) of each state slot, in order: probe with one frame of zeros."""
        shapes: list[tuple[int, int]] = []
        x = torch.zeros(1, latent_dim, 1)
        for affine, ops in self.steps:
            if affine is not None:
                x = x * affine[0] + affine[1]
            for kind, payload in ops:
                if kind == "conv" and payload[3] > 0:
                    shapes.append((x.shape[1], payload[3]))
                elif kind == "tconv":
                    mod = payload[0]
                    ctx = (int(mod.kernel_size[0]) - 1) // int(mod.stride[0])
                    if ctx > 0:
                        shapes.append((x.shape[1], ctx))
                if kind not in ("residual_begin", "residual_end"):  # shape-neutral
                    x, _ = _run([(kind, payload)], x, None, stateful=False)
        return shapes

    def forward(self, latents: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b = latents.shape[0]
        slots: list[torch.Tensor] = []
        off = 0
        for c, n in self.layout:
            slots.append(state[:, off: off + c * n].reshape(b, c, n))
            off += c * n
        x = latents
        new: list[torch.Tensor] = []
        si = 0
        for affine, ops in self.steps:
            if affine is not None:
                x = x * affine[0] + affine[1]
            n_slots = sum(1 for k, p in ops if (k == "conv" and p[3] > 0) or k == "tconv")
            x, got = _run(ops, x, slots[si: si + n_slots], stateful=True)
            si += n_slots
            new += got
        return x.reshape(b, -1), torch.cat([s.reshape(b, -1) for s in new], dim=1)
