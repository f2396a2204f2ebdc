"""Fish Speech's modded DAC in the project's own torch (float32, ONNX-traceable), parameters named as codec.pth's
tensors (vLLM-Omni's dac_modules names), weight norm computed from its two tensors.

- `DacDecoder`: codes [B, 10, T] -> audio [B, T * 2048]: each codebook's rows (semantic clamped to its size - 1,
  residual to theirs) through its `out_proj`, summed; the post transformer (causal, window 128, RoPE with the
  bf16 `freqs_cis` table, layer scale); the causal upsampling (transposed conv kernel = stride, then a causal
  ConvNeXt block) per downsample factor in reverse; the causal decoder (conv, then per rate Snake, causal
  transposed conv (kernel 2 x stride, the overhang cut on the right) and three dilated residual units; Snake,
  conv, tanh).
- `DacEncoder`: audio [B, samples] (a multiple of 2048) -> codes [B, 10, frames]: the causal encoder (its
  last block's window-512 transformer), the downsampling (causal conv, ConvNeXt), the pre transformer, then
  the semantic quantizer and the 9 residual ones (in_proj, nearest L2-normalised codebook row, out_proj,
  residual subtracted).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from export.blocks import join_state, snake, split_state
from export.fish_speech.graphs import interleaved_rope
from ttscore.runtime.families.fish_speech.checkpoint import DAC_HEAD_DIM, CodecDims

Get = Callable[[str], torch.Tensor]
# conv(child, x): a block's causal conv `child` (its attribute name) on x; DacStream's continues it from its state.
Conv = Callable[[str, torch.Tensor], torch.Tensor]


def _wn(get: Get, name: str) -> torch.Tensor:
    """The weight of a weight-normed conv (dim 0), either naming."""
    try:
        g, v = get(f"{name}.parametrizations.weight.original0"), get(f"{name}.parametrizations.weight.original1")
    except KeyError:
        g, v = get(f"{name}.weight_g"), get(f"{name}.weight_v")
    norm = v.pow(2).sum(dim=tuple(range(1, v.dim())), keepdim=True).sqrt()
    return g * v / norm


class CausalConv(nn.Module):
    """CausalConvNet: left padding (kernel - 1) * dilation + 1 - stride, no right padding (the lengths here are
    multiples of the stride)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, stride: int = 1, dilation: int = 1,
                 groups: int = 1) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.bias = nn.Parameter(bias, requires_grad=False) if bias is not None else None
        self.stride, self.dilation, self.groups = stride, dilation, groups
        self.pad = (weight.shape[-1] - 1) * dilation + 1 - stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv1d(F.pad(x, (self.pad, 0)), self.weight, self.bias, stride=self.stride, dilation=self.dilation,
                        groups=self.groups)


class CausalConvT(nn.Module):
    """CausalTransConvNet: the transposed conv's overhang (kernel - stride) cut on the right."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor, stride: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.bias = nn.Parameter(bias, requires_grad=False)
        self.stride = stride
        self.cut = weight.shape[-1] - stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.conv_transpose1d(x, self.weight, self.bias, stride=self.stride)
        return y[..., : y.shape[-1] - self.cut] if self.cut else y


class Snake(nn.Module):
    def __init__(self, alpha: torch.Tensor) -> None:
        super().__init__()
        self.alpha = nn.Parameter(alpha, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return snake(x, self.alpha)


class Residual(nn.Module):
    def __init__(self, get: Get, p: str, dilation: int) -> None:
        super().__init__()
        self.a1 = Snake(get(f"{p}.block.0.alpha"))
        self.c1 = CausalConv(_wn(get, f"{p}.block.1.conv"), get(f"{p}.block.1.conv.bias"), dilation=dilation)
        self.a2 = Snake(get(f"{p}.block.2.alpha"))
        self.c2 = CausalConv(_wn(get, f"{p}.block.3.conv"), get(f"{p}.block.3.conv.bias"))

    def forward(self, x: torch.Tensor, conv: Conv | None = None) -> torch.Tensor:
        conv = conv or (lambda child, y: getattr(self, child)(y))
        return x + conv("c2", self.a2(conv("c1", self.a1(x))))


class ConvNeXt(nn.Module):
    def __init__(self, get: Get, p: str) -> None:
        super().__init__()
        self.dw = CausalConv(get(f"{p}.dwconv.conv.weight"), get(f"{p}.dwconv.conv.bias"),
                             groups=get(f"{p}.dwconv.conv.weight").shape[0])
        self.norm = nn.LayerNorm(get(f"{p}.norm.weight").shape[0], eps=1e-6)
        self.norm.weight.data.copy_(get(f"{p}.norm.weight"))
        self.norm.bias.data.copy_(get(f"{p}.norm.bias"))
        self.pw1 = nn.Linear(1, 1)
        self.pw1.weight, self.pw1.bias = (nn.Parameter(get(f"{p}.pwconv1.weight")),
                                          nn.Parameter(get(f"{p}.pwconv1.bias")))
        self.pw2 = nn.Linear(1, 1)
        self.pw2.weight, self.pw2.bias = (nn.Parameter(get(f"{p}.pwconv2.weight")),
                                          nn.Parameter(get(f"{p}.pwconv2.bias")))
        self.gamma = nn.Parameter(get(f"{p}.gamma"))

    def forward(self, x: torch.Tensor, conv: Conv | None = None) -> torch.Tensor:
        y = (conv("dw", x) if conv else self.dw(x)).permute(0, 2, 1)
        y = self.pw2(F.gelu(self.pw1(self.norm(y)))) * self.gamma
        return x + y.permute(0, 2, 1)


def freqs_cis(state: dict[str, torch.Tensor], name: str, block: int) -> torch.Tensor:
    """The transformer's RoPE table [block, 32, 2]: codec.pth's own when it stores one, else
    precompute_freqs_cis(block, 64, 10000) rounded to bf16 (the dac_modules buffer)."""
    if f"{name}.freqs_cis" in state:
        return state[f"{name}.freqs_cis"].to(torch.float32)
    freqs = 1.0 / (10000 ** (torch.arange(0, DAC_HEAD_DIM, 2)[: DAC_HEAD_DIM // 2].float() / DAC_HEAD_DIM))
    ang = torch.outer(torch.arange(block, dtype=torch.float32), freqs)
    cis = torch.polar(torch.ones_like(ang), ang)
    return torch.stack([cis.real, cis.imag], dim=-1).to(torch.bfloat16).to(torch.float32)


class WindowTransformer(nn.Module):
    """WindowLimitedTransformer (causal, channels first): x [B, D, T] -> [B, D, T]."""

    def __init__(self, get: Get, p: str, layers: int, window: int, table: torch.Tensor) -> None:
        super().__init__()
        self.window = window
        self.register_buffer("table", table, persistent=False)
        names = ("attention.wqkv.weight", "attention.wo.weight", "feed_forward.w1.weight", "feed_forward.w2.weight",
                 "feed_forward.w3.weight", "attention_norm.weight", "ffn_norm.weight", "attention_layer_scale.gamma",
                 "ffn_layer_scale.gamma")
        self.params = nn.ParameterList(nn.Parameter(get(f"{p}.layers.{i}.{n}"), requires_grad=False)
                                       for i in range(layers) for n in names)
        self.layers = layers
        self.norm = nn.Parameter(get(f"{p}.norm.weight"), requires_grad=False)

    @staticmethod
    def _rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + 1e-5) * w

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.transpose(1, 2)
        t = x.shape[1]
        fc = torch.as_tensor(self.table)[:t]  # [T, 32, 2]
        cos, sin = fc[..., 0][None, :, None], fc[..., 1][None, :, None]
        i = torch.arange(t)
        allowed = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - self.window)
        bias = torch.where(allowed, torch.tensor(0.0), torch.tensor(float("-inf")))
        return self.run(x, cos, sin, bias).transpose(1, 2)

    def run(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, bias: torch.Tensor,
            cache: Callable[[int, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None
            ) -> torch.Tensor:
        """The layers and the final norm on x [B, T, D] (channels last), given the RoPE cos/sin and the additive
        attention mask; `cache(layer, k, v)` gives the keys and values to attend (a stream's past before them)."""
        b, t, d = x.shape
        heads = d // DAC_HEAD_DIM
        ps = list(self.params)
        for li in range(self.layers):
            wqkv, wo, w1, w2, w3, n1, n2, g1, g2 = ps[9 * li:9 * li + 9]
            q, k, v = F.linear(self._rms(x, n1), wqkv).split([d, d, d], dim=-1)
            q = interleaved_rope(q.view(b, t, heads, DAC_HEAD_DIM), cos, sin).transpose(1, 2)
            k = interleaved_rope(k.view(b, t, heads, DAC_HEAD_DIM), cos, sin).transpose(1, 2)
            v = v.view(b, t, heads, DAC_HEAD_DIM).transpose(1, 2)
            if cache is not None:
                k, v = cache(li, k, v)
            att = (torch.matmul(q, k.transpose(-1, -2)) * DAC_HEAD_DIM ** -0.5 + bias).softmax(-1)
            y = torch.matmul(att, v).transpose(1, 2).reshape(b, t, d)
            h = x + F.linear(y, wo) * g1
            x = h + F.linear(F.silu(F.linear(self._rms(h, n2), w1)) * F.linear(self._rms(h, n2), w3), w2) * g2
        return self._rms(x, self.norm)


class DacDecoder(nn.Module):
    """codes [B, 10, T] (int64) -> audio [B, T * samples_per_frame]."""

    def __init__(self, state: dict[str, torch.Tensor], d: CodecDims) -> None:
        super().__init__()

        def get(name: str) -> torch.Tensor:
            return state[name].to(torch.float32)

        q = "quantizer"
        books = [f"{q}.semantic_quantizer.quantizers.0"] + [f"{q}.quantizer.quantizers.{i}" for i in range(d.n_residual)]
        self.sizes = [d.semantic_codebook_size] + [d.residual_codebook_size] * d.n_residual
        # Each codebook's rows through its out_proj (a 1x1 conv): one table [size, latent] per codebook.
        self.tables = nn.ParameterList(
            nn.Parameter(get(f"{p}.codebook.weight") @ _wn(get, f"{p}.out_proj")[..., 0].T + get(f"{p}.out_proj.bias"),
                         requires_grad=False) for p in books)
        self.post = WindowTransformer(get, f"{q}.post_module", d.quantizer_layers[1], 128,
                                      freqs_cis(state, f"{q}.post_module", 4096))
        ups: list[nn.Module] = []
        for j, f in enumerate(reversed(d.downsample)):
            ups += [CausalConvT(get(f"{q}.upsample.{j}.0.conv.weight"), get(f"{q}.upsample.{j}.0.conv.bias"), f),
                    ConvNeXt(get, f"{q}.upsample.{j}.1")]
        self.upsample = nn.Sequential(*ups)
        layers: list[nn.Module] = [CausalConv(_wn(get, "decoder.model.0.conv"), get("decoder.model.0.conv.bias"))]
        for i, stride in enumerate(d.decoder_rates):
            p = f"decoder.model.{i + 1}.block"
            layers += [Snake(get(f"{p}.0.alpha")),
                       CausalConvT(_wn(get, f"{p}.1.conv"), get(f"{p}.1.conv.bias"), stride),
                       *(Residual(get, f"{p}.{j + 2}", dil) for j, dil in enumerate((1, 3, 9)))]
        m = len(d.decoder_rates)
        layers += [Snake(get(f"decoder.model.{m + 1}.alpha")),
                   CausalConv(_wn(get, f"decoder.model.{m + 2}.conv"), get(f"decoder.model.{m + 2}.conv.bias")),
                   nn.Tanh()]
        self.decoder = nn.Sequential(*layers)

    def latent(self, codes: torch.Tensor) -> torch.Tensor:
        z = 0.0
        for i, (table, size) in enumerate(zip(self.tables, self.sizes, strict=True)):
            z = z + table[codes[:, i].clamp(max=size - 1)]
        return torch.as_tensor(z).transpose(1, 2)  # [B, latent, T]

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        z = self.upsample(self.post(self.latent(codes)))
        return self.decoder(z)[:, 0]


class DacEncoder(nn.Module):
    """audio [B, samples] (samples a multiple of samples_per_frame) -> codes [B, 10, frames] (int64)."""

    def __init__(self, state: dict[str, torch.Tensor], d: CodecDims) -> None:
        super().__init__()

        def get(name: str) -> torch.Tensor:
            return state[name].to(torch.float32)

        layers: list[nn.Module] = [CausalConv(_wn(get, "encoder.block.0.conv"), get("encoder.block.0.conv.bias"))]
        for i, (stride, n_t) in enumerate(zip(d.encoder_rates, d.encoder_layers, strict=True)):
            p = f"encoder.block.{i + 1}.block"
            layers += [*(Residual(get, f"{p}.{j}", dil) for j, dil in enumerate((1, 3, 9))),
                       Snake(get(f"{p}.3.alpha")),
                       CausalConv(_wn(get, f"{p}.4.conv"), get(f"{p}.4.conv.bias"), stride=stride)]
            if n_t:
                layers.append(WindowTransformer(get, f"{p}.5", n_t, 512, freqs_cis(state, f"{p}.5", 16384)))
        n = len(d.encoder_rates)
        layers += [Snake(get(f"encoder.block.{n + 1}.alpha")),
                   CausalConv(_wn(get, f"encoder.block.{n + 2}.conv"), get(f"encoder.block.{n + 2}.conv.bias"))]
        self.encoder = nn.Sequential(*layers)
        q = "quantizer"
        down: list[nn.Module] = []
        for i, f in enumerate(d.downsample):
            down += [CausalConv(get(f"{q}.downsample.{i}.0.conv.weight"), get(f"{q}.downsample.{i}.0.conv.bias"),
                                stride=f),
                     ConvNeXt(get, f"{q}.downsample.{i}.1")]
        self.downsample = nn.Sequential(*down)
        self.pre = WindowTransformer(get, f"{q}.pre_module", d.quantizer_layers[0], 128,
                                     freqs_cis(state, f"{q}.pre_module", 4096))
        books = [f"{q}.semantic_quantizer.quantizers.0"] + [f"{q}.quantizer.quantizers.{i}" for i in range(d.n_residual)]
        self.in_w = nn.ParameterList(nn.Parameter(_wn(get, f"{p}.in_proj")[..., 0], requires_grad=False) for p in books)
        self.in_b = nn.ParameterList(nn.Parameter(get(f"{p}.in_proj.bias"), requires_grad=False) for p in books)
        self.out_w = nn.ParameterList(nn.Parameter(_wn(get, f"{p}.out_proj")[..., 0], requires_grad=False) for p in books)
        self.out_b = nn.ParameterList(nn.Parameter(get(f"{p}.out_proj.bias"), requires_grad=False) for p in books)
        self.books = nn.ParameterList(nn.Parameter(get(f"{p}.codebook.weight"), requires_grad=False) for p in books)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        z = self.pre(self.downsample(self.encoder(audio[:, None]))).transpose(1, 2)  # [B, T, latent]
        codes: list[torch.Tensor] = []
        semantic = torch.zeros_like(z)
        residual = z
        for i in range(len(self.books)):
            if i == 1:  # the residual quantizers start from z minus the semantic quantizer's output
                residual = z - semantic
            ze = F.linear(residual, self.in_w[i], self.in_b[i])
            enc = F.normalize(ze, dim=-1)
            book = F.normalize(self.books[i], dim=-1)
            dist = enc.pow(2).sum(-1, keepdim=True) - 2 * enc @ book.T + book.pow(2).sum(-1)[None, None]
            idx = (-dist).argmax(-1)
            zq = F.linear(self.books[i][idx], self.out_w[i], self.out_b[i])
            if i == 0:
                semantic = zq
            else:
                residual = residual - zq
            codes.append(idx)
        return torch.stack(codes, dim=1)


class DacStream(DacDecoder):
    """The DAC decoder as an exact streaming graph: codes [B, 10, n] (the next n frames) + state [B, S] (zeros
    start an utterance) -> pcm [B, n * samples_per_frame] + new_state. Chunks decoded one after another equal
    one whole decode, each row at its own frame count: every layer is causal, so the state holds what each needs of the past: the frame count
    (the post transformer's RoPE position), its K/V of the last window - 1 frames per layer, each causal conv's
    last (kernel - 1) * dilation input samples, each overlapping transposed conv's last input sample."""

    def __init__(self, state: dict[str, torch.Tensor], d: CodecDims) -> None:
        super().__init__(state, d)
        heads = d.latent_dim // DAC_HEAD_DIM
        w = self.post.window - 1
        layout: list[tuple[str, tuple[int, ...]]] = [("frames", (1,))]
        for i in range(self.post.layers):
            layout += [(f"post.{i}.k", (heads, w, DAC_HEAD_DIM)), (f"post.{i}.v", (heads, w, DAC_HEAD_DIM))]
        for name, m in [*(("upsample." + n, m) for n, m in self.upsample.named_modules()),
                        *(("decoder." + n, m) for n, m in self.decoder.named_modules())]:
            if isinstance(m, CausalConv) and m.pad > 0:
                layout.append((name, (m.weight.shape[1] * m.groups, m.pad)))
            elif isinstance(m, CausalConvT) and m.cut > 0:
                layout.append((name, (m.weight.shape[0], 1)))
        self.layout = layout
        self.state_size = sum(int(torch.tensor(s).prod()) for _, s in layout)
        self._conv_names = {n for n, _ in layout}

    def forward(self, codes: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        b = codes.shape[0]
        parts = split_state(state, self.layout, b)
        new: dict[str, torch.Tensor] = {}
        z, new_frames = self._post(self.latent(codes), parts, new)
        new["frames"] = new_frames
        for prefix, seq in (("upsample.", self.upsample), ("decoder.", self.decoder)):
            z = self._run(seq, prefix, z, parts, new)
        return z[:, 0], join_state(new, (name for name, _ in self.layout), b)

    def _post(self, x: torch.Tensor, parts: dict[str, torch.Tensor], new: dict[str, torch.Tensor]
              ) -> tuple[torch.Tensor, torch.Tensor]:
        p = self.post
        x = x.transpose(1, 2)
        b, n, _ = x.shape
        w = p.window - 1
        start = parts["frames"][:, 0].to(torch.int64)  # [B]: each row's frames so far
        table = torch.as_tensor(p.table)
        fc = table[start[:, None] + torch.arange(n)[None]]  # [B, n, 32, 2]
        cos, sin = fc[..., 0][:, :, None], fc[..., 1][:, :, None]
        q_i = torch.arange(n)[:, None]
        s_i = torch.arange(w)[None, :]
        # cache slot s holds position start - w + s: visible when valid (>= 0) and within the window of query q
        cache_ok = (s_i >= q_i)[None] & (s_i[None] >= (w - start)[:, None, None])  # [B, n, w]
        r_i = torch.arange(n)[None, :]
        new_ok = ((r_i <= q_i) & (r_i > q_i - p.window))[None].expand(b, n, n)
        allowed = torch.cat([cache_ok, new_ok], dim=2)[:, None]  # [B, 1, n, w + n]
        bias = torch.where(allowed, torch.tensor(0.0), torch.tensor(float("-inf")))

        def cache(li: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            k_all = torch.cat([parts[f"post.{li}.k"], k], dim=2)
            v_all = torch.cat([parts[f"post.{li}.v"], v], dim=2)
            new[f"post.{li}.k"], new[f"post.{li}.v"] = k_all[:, :, -w:], v_all[:, :, -w:]
            return k_all, v_all

        return p.run(x, cos, sin, bias, cache).transpose(1, 2), (start + n).to(torch.float32)[:, None]

    def _run(self, module: nn.Module, name: str, x: torch.Tensor, parts: dict[str, torch.Tensor],
             new: dict[str, torch.Tensor]) -> torch.Tensor:
        """`module` on the next samples, its causal convs continuing from their state."""
        if isinstance(module, CausalConv):
            if module.pad == 0:
                return module(x)
            full = torch.cat([parts[name[:-1]], x], dim=-1)
            new[name[:-1]] = full[..., -module.pad:]
            return F.conv1d(full, module.weight, module.bias, stride=module.stride, dilation=module.dilation,
                            groups=module.groups)
        if isinstance(module, CausalConvT):
            if module.cut == 0:
                return module(x)
            full = torch.cat([parts[name[:-1]], x], dim=-1)
            new[name[:-1]] = x[..., -1:]
            y = F.conv_transpose1d(full, module.weight, module.bias, stride=module.stride)
            return y[..., module.stride: module.stride + x.shape[-1] * module.stride]
        if isinstance(module, Residual | ConvNeXt):
            return module(x, lambda child, y: self._run(getattr(module, child), f"{name}{child}.", y, parts, new))
        if isinstance(module, nn.Sequential):
            for child_name, child in module.named_children():
                x = self._run(child, f"{name}{child_name}.", x, parts, new)
            return x
        return module(x)
