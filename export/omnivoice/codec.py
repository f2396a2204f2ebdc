"""The Higgs Audio v2 tokenizer (OmniVoice's audio_tokenizer/) as torch modules named as its
checkpoint's tensors, built from transformers 4.57's DacModel and HubertModel plus the tokenizer's own
semantic encoder/decoder, and what HiggsAudioV2TokenizerModel (transformers >= 5.3) does with them:
decode (RVQ lookup, fc2, the DAC decoder with output_padding = stride % 2 and no tanh) and encode
(16 kHz resample, HuBERT, semantic encoder, DAC encoder, fc, residual VQ at the top bandwidth).
`Codec` loads a checkpoint strictly; the 5.x class itself runs in the second reference environment
(tests/omnivoice_codec_ref5.py).
"""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any


def codec_hidden(codec: dict[str, Any]) -> int:
    """The quantizer's width: acoustic hidden + semantic hidden (HiggsAudioV2TokenizerConfig.hidden_size)."""
    return int(codec["acoustic_model_config"]["hidden_size"]) + int(codec["semantic_model_config"]["hidden_size"])


def codec_hop(codec: dict[str, Any]) -> int:
    """HiggsAudioV2TokenizerConfig.hop_length: the product of the DAC downsampling ratios."""
    import math

    return math.prod(int(r) for r in codec["acoustic_model_config"]["downsampling_ratios"])


def num_quantizers(codec: dict[str, Any]) -> int:
    """HiggsAudioV2TokenizerConfig.num_quantizers: the top bandwidth over (frame rate x code bits)."""
    import math

    frame_rate = math.ceil(int(codec["sample_rate"]) / codec_hop(codec))
    bits = math.ceil(math.log2(int(codec["codebook_size"])))
    return int(1000 * float(codec["target_bandwidths"][-1]) // (frame_rate * bits))


def dac_model(codec: dict[str, Any]) -> Any:
    """transformers' DacModel of the tokenizer's acoustic_model_config (its encoder and decoder halves)."""
    from transformers import DacConfig, DacModel

    return DacModel(DacConfig(**{k: v for k, v in codec["acoustic_model_config"].items() if k != "model_type"}))


def dac_decoder(codec: dict[str, Any]) -> Any:
    """The acoustic decoder as the Higgs tokenizer builds it: transformers' DacModel decoder with each
    ConvTranspose1d's output_padding = stride % 2 and the final tanh removed."""
    from torch import nn

    decoder = dac_model(codec).decoder
    for module in decoder.modules():
        if isinstance(module, nn.ConvTranspose1d):
            module.output_padding = (int(module.stride[0]) % 2,)
    decoder.tanh = nn.Identity()
    return decoder


ENCODER_PREFIXES = ("acoustic_encoder.", "encoder_semantic.", "decoder_semantic.", "semantic_model.", "fc.", "fc1.")


def _residual_unit(channels: int, kernel: int, dilation: int) -> Any:
    """HiggsAudioV2TokenizerResidualUnit's modules: conv1 (dilated, no bias), conv2 (1x1, no bias)."""
    from torch import nn

    unit = nn.Module()
    unit.conv1 = nn.Conv1d(channels, channels, kernel, padding=((kernel - 1) // 2) * dilation, dilation=dilation,
                           bias=False)
    unit.conv2 = nn.Conv1d(channels, channels, 1, bias=False)
    return unit


def semantic_encoder(cfg: dict[str, Any]) -> Any:
    """The tokenizer's SemanticEncoder as modules named as its tensors: conv, then per stride a block of
    residual units and a strided conv (kernel 3 for stride 1, else 2 * stride)."""
    from torch import nn

    width = int(cfg["semantic_model_config"]["hidden_size"])
    k = int(cfg.get("kernel_size", 3))
    enc = nn.Module()
    enc.conv = nn.Conv1d(width, width, k, 1, k // 2, bias=False)
    blocks = nn.ModuleList()
    cin = width
    for ratio, stride in zip(cfg.get("channel_ratios", [1, 1]), cfg.get("strides", [1, 1]), strict=True):
        cout = int(width * ratio)
        block = nn.Module()
        block.res_units = nn.ModuleList([_residual_unit(cin, int(cfg.get("unit_kernel_size", 3)), int(d))
                                         for d in cfg.get("block_dilations", [1, 1])])
        kernel = 3 if int(stride) == 1 else 2 * int(stride)
        block.conv = nn.Conv1d(cin, cout, kernel, int(stride), (kernel - 1) // 2, bias=True)
        blocks.append(block)
        cin = cout
    enc.conv_blocks = blocks
    return enc


def semantic_decoder(cfg: dict[str, Any]) -> Any:
    """The tokenizer's SemanticDecoder (unused by encode and decode; its tensors are in the checkpoint)."""
    from torch import nn

    width = int(cfg["semantic_model_config"]["hidden_size"])
    k = int(cfg.get("kernel_size", 3))
    ratios = list(cfg.get("channel_ratios", [1, 1]))
    dec = nn.Module()
    dec.conv1 = nn.Conv1d(width, int(width * ratios[0]), k, 1, k // 2, bias=False)
    blocks = nn.ModuleList()
    for i, stride in enumerate(cfg.get("strides", [1, 1])):
        cin = int(width * ratios[i])
        cout = int(width * ratios[i + 1]) if i < len(ratios) - 1 else width
        block = nn.Module()
        s = int(stride)
        if s == 1:
            block.conv = nn.Conv1d(cin, cout, 3, 1, 1, bias=True)
        else:
            block.conv = nn.ConvTranspose1d(cin, cout, 2 * s, s, (s + 1) // 2, 1 if s % 2 == 1 else 0, bias=False)
        block.res_units = nn.ModuleList([_residual_unit(cout, int(cfg.get("unit_kernel_size", 3)), int(d))
                                         for d in cfg.get("block_dilations", [1, 1])])
        blocks.append(block)
    dec.conv_blocks = blocks
    dec.conv2 = nn.Conv1d(width, width, k, 1, k // 2, bias=False)
    return dec


def semantic_model(cfg: dict[str, Any]) -> Any:
    """The HuBERT semantic model (transformers' HubertModel; eager attention, in eval mode)."""
    from transformers import HubertConfig, HubertModel

    sem = {k: v for k, v in cfg["semantic_model_config"].items() if k != "model_type"}
    sem.setdefault("mask_time_prob", 0.0)
    config = HubertConfig(**sem)
    config._attn_implementation = "eager"
    return HubertModel(config).eval()


def codec_modules(cfg: dict[str, Any], encoder: bool = False) -> Any:
    """A Higgs Audio v2 tokenizer config as modules named as its checkpoint's tensors, torch's default
    init (codebooks zero): the decoder side (quantizer.quantizers.*, fc2, acoustic_decoder) and, with
    `encoder`, the rest of HiggsAudioV2TokenizerModel (acoustic_encoder, semantic_model,
    encoder_semantic, decoder_semantic, fc, fc1)."""
    import torch
    from torch import nn

    hidden, dim, size = codec_hidden(cfg), int(cfg["codebook_dim"]), int(cfg["codebook_size"])
    module = nn.Module()
    module.quantizer = nn.Module()
    quantizers = nn.ModuleList()
    for _ in range(num_quantizers(cfg)):
        q = nn.Module()
        q.codebook = nn.Module()
        q.codebook.register_buffer("embed", torch.zeros(size, dim))
        q.codebook.register_buffer("inited", torch.zeros(1))
        q.codebook.register_buffer("cluster_size", torch.zeros(size))
        q.codebook.register_buffer("embed_avg", torch.zeros(size, dim))
        q.project_in = nn.Linear(hidden, dim)
        q.project_out = nn.Linear(dim, hidden)
        quantizers.append(q)
    module.quantizer.quantizers = quantizers
    module.fc2 = nn.Linear(hidden, int(cfg["acoustic_model_config"]["hidden_size"]))
    module.acoustic_decoder = dac_decoder(cfg)
    if encoder:
        module.acoustic_encoder = dac_model(cfg).encoder
        module.semantic_model = semantic_model(cfg)
        module.encoder_semantic = semantic_encoder(cfg)
        module.decoder_semantic = semantic_decoder(cfg)
        module.fc = nn.Linear(hidden, hidden)
        module.fc1 = nn.Linear(hidden, int(cfg["semantic_model_config"]["hidden_size"]))
    return module


def has_encoder(names: Any) -> bool:
    """Whether a tokenizer checkpoint's tensor names include the encoder side."""
    return any(str(n).startswith(ENCODER_PREFIXES) for n in names)


def _conv_out(length: int, conv: Any) -> int:
    return int((length + 2 * conv.padding[0] - conv.dilation[0] * (conv.kernel_size[0] - 1) - 1) / conv.stride[0] + 1)


def encode_codes(module: Any, cfg: dict[str, Any], audio: Any) -> Any:
    """HiggsAudioV2TokenizerModel.encode at the top bandwidth: audio [B, 1, N] (24 kHz) -> codes [B, Q, T].
    Semantic: resample to 16 kHz, pad 160 each side, HuBERT, mean of all hidden states, every
    `semantic_downsample_factor`-th frame, the semantic encoder. Acoustic: the DAC encoder (its input
    padded by hop / 2 each side when its frame count would differ). fc over both, then residual VQ."""
    import math

    import torch
    import torch.nn.functional as F
    from torch import nn

    from export.blocks import sinc_resample

    sr, sem_sr = int(cfg["sample_rate"]), int(cfg.get("semantic_sample_rate", 16000))
    hop = codec_hop(cfg)
    factor = int(hop / (sr / sem_sr) / int(cfg.get("downsample_factor", 320)))
    x = sinc_resample(audio, sr, sem_sr) if sr != sem_sr else audio
    x = F.pad(x[:, 0, :], (160, 160))
    states = module.semantic_model(x, output_hidden_states=True).hidden_states
    feats = torch.stack(list(states), dim=1).mean(dim=1)
    if factor > 1:
        feats = feats[:, ::factor, :]
    e_semantic = run_semantic_encoder(module.encoder_semantic, feats.transpose(1, 2))
    length = audio.shape[2]
    if not torch.jit.is_tracing():
        frames = length
        for conv in (m for m in module.acoustic_encoder.modules() if isinstance(m, nn.Conv1d)):
            frames = _conv_out(frames, conv)
        if frames != e_semantic.shape[2]:
            audio = F.pad(audio, (hop // 2, hop // 2))
    e_acoustic = module.acoustic_encoder(audio)
    emb = module.fc(torch.cat([e_acoustic, e_semantic], dim=1).transpose(1, 2))  # [B, T, hidden]
    bits = math.ceil(math.log2(int(cfg["codebook_size"])))
    per_q = bits * math.ceil(sr / hop) / 1000
    count = int(max(1, math.floor(float(cfg["target_bandwidths"][-1]) / per_q)))
    residual, codes = emb, []
    for q in list(module.quantizer.quantizers)[:count]:
        h = q.project_in(residual)
        embed = q.codebook.embed
        dist = -(h.pow(2).sum(-1, keepdim=True) - 2 * h @ embed.t() + embed.pow(2).sum(-1)[None, None, :])
        idx = dist.max(dim=-1).indices
        residual = residual - q.project_out(F.embedding(idx, embed))
        codes.append(idx)
    return torch.stack(codes, dim=1)


def decode_codes(module: Any, codes: Any) -> Any:
    """HiggsAudioV2TokenizerModel.decode: codes [B, 8, T] -> the RVQ lookup (+ project_out) summed over the
    codebooks, fc2, the DAC acoustic decoder -> audio [B, 1, T * hop]."""
    import torch.nn.functional as F

    out = 0
    for i, q in enumerate(module.quantizer.quantizers):
        out = out + q.project_out(F.embedding(codes[:, i], q.codebook.embed))
    return module.acoustic_decoder(module.fc2(out).transpose(1, 2))


def run_semantic_encoder(enc: Any, x: Any) -> Any:
    import torch.nn.functional as F

    x = enc.conv(x)
    for block in enc.conv_blocks:
        for unit in block.res_units:
            x = x + unit.conv2(F.elu(unit.conv1(F.elu(x))))
        x = block.conv(x)
    return x


class Codec:
    """The Higgs Audio v2 tokenizer as torch modules, loaded strictly from an audio_tokenizer/ directory:
    its decoder side, and its encoder side when the checkpoint has one. Also the stand-in for
    transformers.HiggsAudioV2TokenizerModel (`from_pretrained`, `decode(codes [B, 8, T])`,
    `encode(audio [B, 1, N])`, `config.hop_length`)."""

    def __init__(self, root: Path) -> None:
        import torch
        from safetensors.torch import load_file

        from ttscore.runtime.checkpoint_kit import weight_norm_name

        self.config_dict: dict[str, Any] = json.loads((Path(root) / "config.json").read_text())
        cfg = self.config_dict
        # Weight-norm tensors saved under torch's legacy names (HuBERT's positional conv as weight_g / weight_v):
        # transformers 5.x renames them on load ("legacy" conversion mapping); so does Codec.
        state = {weight_norm_name(k): v for k, v in load_file(str(Path(root) / "model.safetensors")).items()}
        self.has_encoder = has_encoder(state)
        self.module: Any = codec_modules(cfg, encoder=self.has_encoder)
        self.module.load_state_dict(state, strict=True)
        self.module.eval()
        self.device = torch.device("cpu")
        hop = codec_hop(cfg)
        self.config = types.SimpleNamespace(frame_rate=-(-int(cfg["sample_rate"]) // hop), sample_rate=cfg["sample_rate"],
                                            hop_length=hop)

    @classmethod
    def from_pretrained(cls, path: str, **_: Any) -> Codec:
        return cls(Path(path))

    def decode_audio(self, codes: Any) -> Any:
        """codes [B, 8, T] -> audio [B, 1, T * hop]."""
        return decode_codes(self.module, codes)

    def decode(self, codes: Any) -> Any:
        """The 5.x output: its `audio_values`."""
        import torch

        with torch.no_grad():
            return types.SimpleNamespace(audio_values=self.decode_audio(codes))

    def encode_codes(self, audio: Any) -> Any:
        """audio [B, 1, N] at 24 kHz -> codes [B, 8, T] (HiggsAudioV2TokenizerModel.encode)."""
        if not self.has_encoder:
            raise RuntimeError("this audio tokenizer checkpoint has no encoder side")
        return encode_codes(self.module, self.config_dict, audio)

    def encode(self, audio: Any) -> Any:
        """The 5.x output: its `audio_codes`."""
        import torch

        with torch.no_grad():
            return types.SimpleNamespace(audio_codes=self.encode_codes(audio))
