"""NanoCodec (NeMo `AudioCodecModel`, nvidia/nemo-nano-codec-22khz-1.89kbps-21.5fps), decode side,
in the project's own torch, and its `.nemo` archive.

The archive is a tar of `model_config.yaml` + `model_weights.ckpt` (a torch state dict). Only the
decoder is used: per-dimension FSQ dequantization `(code - L//2) / (L//2)` (what vLLM-Omni's
`decode_from_codes` does) and NeMo's `CausalHiFiGANDecoder` (nemo-toolkit 3.0.0,
`collections/tts/modules/audio_codec_modules.py`), ported module for module with NeMo's attribute
names, so `audio_decoder.*` of the state dict loads strictly (weight norm as torch's
parametrization, `conv.parametrizations.weight.original0/1`):

    pre_conv (causal conv, in_kernel_size) -> for each up-sample rate r: HalfSnake, causal grouped
    ConvTranspose1d (kernel 2r, stride r, right trim r), HiFiGANResLayer (the mean over kernel sizes
    of chained ResidualBlocks over dilations: act, causal conv (k, d), act, causal conv (k, 1),
    residual) -> HalfSnake -> causal conv (out_kernel_size) -> clamp [-1, 1].

Every convolution is causal (left zero padding), so `Streaming` decodes chunk after chunk with each
convolution's input history as state and gives exactly the whole decode.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from export.blocks import join_state, snake, split_state
from ttscore.contract.errors import CheckpointError

CONFIG_MEMBER = "model_config.yaml"
WEIGHTS_MEMBER = "model_weights.ckpt"
DECODER_TARGET = "nemo.collections.tts.modules.audio_codec_modules.CausalHiFiGANDecoder"
QUANTIZER_TARGET = "nemo.collections.tts.modules.audio_codec_modules.GroupFiniteScalarQuantizer"


class Snake(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(1, channels, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return snake(x, self.alpha)


class HalfSnake(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.snake_channels = channels // 2
        self.snake_act = Snake(self.snake_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.snake_channels
        return torch.cat([self.snake_act(x[:, :c]), F.leaky_relu(x[:, c:], 0.01)], dim=1)


class CodecActivation(nn.Module):
    def __init__(self, kind: str, channels: int) -> None:
        super().__init__()
        kind = kind.lower()
        if kind == "half_snake":
            self.activation: nn.Module = HalfSnake(channels)
        elif kind == "snake":
            self.activation = Snake(channels)
        elif kind == "lrelu":
            self.activation = nn.LeakyReLU()
        elif kind == "elu":
            self.activation = nn.ELU()
        else:
            raise CheckpointError(f"NanoCodec: activation {kind!r} is not supported")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.activation(x)
        return out


class CausalConv1dNorm(nn.Module):
    """Left-padded (kernel - 1) * dilation, stride 1."""

    def __init__(self, cin: int, cout: int, kernel: int, dilation: int = 1) -> None:
        super().__init__()
        self.conv = nn.utils.parametrizations.weight_norm(nn.Conv1d(cin, cout, kernel, dilation=dilation))
        self.history = (kernel - 1) * dilation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.conv(F.pad(x, (self.history, 0)))
        return out


class CausalConvTranspose1dNorm(nn.Module):
    """Grouped ConvTranspose1d (kernel 2 * stride), the last `stride` samples trimmed."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, groups: int) -> None:
        super().__init__()
        self.conv = nn.utils.parametrizations.weight_norm(
            nn.ConvTranspose1d(cin, cout, kernel, stride, groups=groups))
        self.trim = kernel - stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = self.conv(x)
        return y[..., : y.shape[-1] - self.trim]


class ResidualBlock(nn.Module):
    def __init__(self, channels: int, kernel: int, dilation: int, activation: str) -> None:
        super().__init__()
        self.input_activation = CodecActivation(activation, channels)
        self.skip_activation = CodecActivation(activation, channels)
        self.input_conv = CausalConv1dNorm(channels, channels, kernel, dilation)
        self.skip_conv = CausalConv1dNorm(channels, channels, kernel, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.skip_activation(self.input_conv(self.input_activation(x)))
        return x + self.skip_conv(h)


class HiFiGANResBlock(nn.Module):
    def __init__(self, channels: int, kernel: int, dilations: list[int], activation: str) -> None:
        super().__init__()
        self.res_blocks = nn.ModuleList(ResidualBlock(channels, kernel, d, activation) for d in dilations)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.res_blocks:
            x = block(x)
        return x


class HiFiGANResLayer(nn.Module):
    def __init__(self, channels: int, kernels: list[int], dilations: list[int], activation: str) -> None:
        super().__init__()
        self.res_blocks = nn.ModuleList(HiFiGANResBlock(channels, k, dilations, activation) for k in kernels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outs = [block(x) for block in self.res_blocks]
        return cast(torch.Tensor, sum(outs)) / len(outs)


class CausalHiFiGANDecoder(nn.Module):
    """dequantized latents [B, D, T] -> audio [B, T * prod(up_sample_rates)]."""

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        rates = [int(r) for r in cfg.get("up_sample_rates", (8, 8, 2, 2))]
        channels = int(cfg.get("base_channels", 512))
        activation = str(cfg.get("activation", "lrelu"))
        kernels = [int(k) for k in cfg.get("resblock_kernel_sizes", (3, 7, 11))]
        dilations = [int(d) for d in cfg.get("resblock_dilation_sizes", (1, 3, 5))]
        if cfg.get("output_activation", "tanh") not in ("tanh", "clamp"):
            raise CheckpointError(f"NanoCodec: output_activation {cfg['output_activation']!r} is not supported")
        self.tanh = cfg.get("output_activation", "tanh") == "tanh"
        grouped = bool(cfg.get("n_groups_equal_to_out_channels", True))
        self.up_sample_rates = rates
        self.pre_conv = CausalConv1dNorm(int(cfg["input_dim"]), channels, int(cfg.get("in_kernel_size", 7)))
        self.activations = nn.ModuleList()
        self.up_sample_conv_layers = nn.ModuleList()
        self.res_layers = nn.ModuleList()
        for rate in rates:
            out = channels // 2
            self.activations.append(CodecActivation(activation, channels))
            self.up_sample_conv_layers.append(
                CausalConvTranspose1dNorm(channels, out, 2 * rate, rate, out if grouped else 1))
            self.res_layers.append(HiFiGANResLayer(out, kernels, dilations, activation))
            channels = out
        self.post_activation = CodecActivation(activation, channels)
        self.post_conv = CausalConv1dNorm(channels, 1, int(cfg.get("out_kernel_size", 3)))

    @property
    def hop(self) -> int:
        n = 1
        for r in self.up_sample_rates:
            n *= r
        return n

    def output(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) if self.tanh else torch.clamp(x, -1.0, 1.0)

    def forward(self, latents: torch.Tensor) -> torch.Tensor:
        x = self.pre_conv(latents)
        for act, up, res in zip(self.activations, self.up_sample_conv_layers, self.res_layers, strict=True):
            x = res(up(act(x)))
        return self.output(self.post_conv(self.post_activation(x)))[:, 0]


class NanoCodec(nn.Module):
    """codes [B, 32, T] (per-dimension FSQ codes) -> audio [B, T * hop]."""

    scale: torch.Tensor

    def __init__(self, cfg: dict[str, Any]) -> None:
        super().__init__()
        dec, vq = cfg.get("audio_decoder"), cfg.get("vector_quantizer")
        if not isinstance(dec, dict) or dec.get("_target_") != DECODER_TARGET:
            raise CheckpointError(f"NanoCodec {CONFIG_MEMBER}: audio_decoder must be {DECODER_TARGET}")
        if not isinstance(vq, dict) or vq.get("_target_") != QUANTIZER_TARGET:
            raise CheckpointError(f"NanoCodec {CONFIG_MEMBER}: vector_quantizer must be {QUANTIZER_TARGET}")
        levels = [int(v) for v in vq["num_levels_per_group"]]
        groups = int(vq["num_groups"])
        if int(dec["input_dim"]) != groups * len(levels):
            raise CheckpointError(f"NanoCodec {CONFIG_MEMBER}: input_dim {dec['input_dim']} != "
                                  f"{groups} groups x {len(levels)} levels")
        self.levels, self.groups = levels, groups
        self.sample_rate = int(cfg.get("sample_rate", 22050))
        self.audio_decoder = CausalHiFiGANDecoder(dec)
        if int(cfg.get("samples_per_frame", self.audio_decoder.hop)) != self.audio_decoder.hop:
            raise CheckpointError(f"NanoCodec {CONFIG_MEMBER}: samples_per_frame != the product of up_sample_rates")
        half = torch.tensor([v // 2 for v in levels] * groups, dtype=torch.float32)
        self.register_buffer("scale", half[None, :, None], persistent=False)

    def dequantize(self, codes: torch.Tensor) -> torch.Tensor:
        return (codes.to(torch.float32) - self.scale) / self.scale

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.audio_decoder(self.dequantize(codes))
        return out


# --- exact streaming -------------------------------------------------------------------------------


def _convs(dec: CausalHiFiGANDecoder) -> list[tuple[str, nn.Module]]:
    """Every convolution that needs input history, in the order the state lays them out."""
    return [(n, m) for n, m in dec.named_modules() if isinstance(m, CausalConv1dNorm | CausalConvTranspose1dNorm)]


def state_layout(codec: NanoCodec) -> list[tuple[str, int, int]]:
    """(convolution, channels, history length) of each slice of the flat state."""
    out = []
    for name, m in _convs(codec.audio_decoder):
        conv = cast(Any, m).conv
        cin = int(conv.in_channels)
        out.append((name, cin, m.history if isinstance(m, CausalConv1dNorm) else 1))
    return out


class Streaming(nn.Module):
    """(codes [B, T, 32], state [B, S]) -> (pcm [B, T * hop], new_state [B, S]): each causal conv
    runs on its input history + the new input and keeps the last `history` input samples; each
    transposed conv keeps its last input frame and emits the samples the new frames complete."""

    def __init__(self, codec: NanoCodec) -> None:
        super().__init__()
        self.codec = codec
        self.layout = state_layout(codec)
        self.state_size = sum(c * n for _, c, n in self.layout)

    def forward(self, codes: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        dec = self.codec.audio_decoder
        b = codes.shape[0]
        slices = split_state(state, ((name, (c, n)) for name, c, n in self.layout), b)
        new: dict[str, torch.Tensor] = {}
        names = {id(m): n for n, m in dec.named_modules()}

        def conv(m: CausalConv1dNorm, x: torch.Tensor) -> torch.Tensor:
            key = names[id(m)]
            full = torch.cat([slices[key], x], dim=-1)
            new[key] = full[..., -m.history:] if m.history else full[..., :0]
            out: torch.Tensor = m.conv(full)
            return out

        def up(m: CausalConvTranspose1dNorm, x: torch.Tensor, stride: int) -> torch.Tensor:
            key = names[id(m)]
            full = torch.cat([slices[key], x], dim=-1)
            new[key] = full[..., -1:]
            y: torch.Tensor = m.conv(full)  # [(T + 2) * stride]: frame -1's tail, then the new frames'
            return y[..., stride:-stride]

        def resblock(block: ResidualBlock, x: torch.Tensor) -> torch.Tensor:
            h = block.skip_activation(conv(block.input_conv, block.input_activation(x)))
            return x + conv(block.skip_conv, h)

        x = conv(dec.pre_conv, self.codec.dequantize(codes.transpose(1, 2)))
        for act, u, res, rate in zip(dec.activations, dec.up_sample_conv_layers, dec.res_layers,
                                     dec.up_sample_rates, strict=True):
            x = up(cast(CausalConvTranspose1dNorm, u), act(x), rate)
            outs = []
            for chain in cast(HiFiGANResLayer, res).res_blocks:
                h = x
                for block in cast(HiFiGANResBlock, chain).res_blocks:
                    h = resblock(cast(ResidualBlock, block), h)
                outs.append(h)
            x = cast(torch.Tensor, sum(outs)) / len(outs)
        y = dec.output(conv(dec.post_conv, dec.post_activation(x)))[:, 0]
        return y, join_state(new, (name for name, _, _ in self.layout), b)


# --- the .nemo archive ----------------------------------------------------------------------------


def _member(tar: tarfile.TarFile, name: str, archive: Path) -> bytes:
    for m in tar.getmembers():
        if m.isfile() and m.name.lstrip("./") == name:
            f = tar.extractfile(m)
            if f is not None:
                return f.read()
    raise CheckpointError(f"{archive}: no {name} in the .nemo archive")


def read_nemo(archive: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(model_config.yaml as a dict, the state dict of model_weights.ckpt)."""
    import yaml

    try:
        with tarfile.open(archive, "r:*") as tar:
            cfg = yaml.safe_load(_member(tar, CONFIG_MEMBER, archive))
            raw = _member(tar, WEIGHTS_MEMBER, archive)
    except (OSError, tarfile.TarError) as exc:
        raise CheckpointError(f"{archive} is not a readable .nemo archive: {exc}") from None
    state = torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    if not isinstance(cfg, dict) or not isinstance(state, dict):
        raise CheckpointError(f"{archive}: unexpected .nemo contents")
    return cfg, state


def write_nemo(archive: Path, cfg: dict[str, Any], state: dict[str, torch.Tensor]) -> None:
    import yaml

    weights = io.BytesIO()
    torch.save(state, weights)
    with tarfile.open(archive, "w") as tar:
        for name, data in ((CONFIG_MEMBER, yaml.safe_dump(cfg, sort_keys=False).encode()),
                           (WEIGHTS_MEMBER, weights.getvalue())):
            info = tarfile.TarInfo(f"./{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def load_codec(archive: Path) -> NanoCodec:
    """The decoder of a .nemo archive, its `audio_decoder.*` loaded strictly (a missing or unexpected
    decoder tensor is refused by name; the encoder, quantizer and discriminator are not used)."""
    cfg, state = read_nemo(archive)
    codec = NanoCodec(cfg).eval()
    prefix = "audio_decoder."
    own = {k[len(prefix):]: v.to(torch.float32) for k, v in state.items() if k.startswith(prefix)}
    want = set(codec.audio_decoder.state_dict())
    missing, unexpected = sorted(want - set(own)), sorted(set(own) - want)
    if missing or unexpected:
        raise CheckpointError(f"{archive}: the NanoCodec decoder's tensors do not match its config: missing "
                              f"{missing[:6]}, unexpected {unexpected[:6]}")
    codec.audio_decoder.load_state_dict(own, strict=True)
    return codec
