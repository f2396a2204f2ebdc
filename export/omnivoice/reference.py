"""The OmniVoice reference (`omnivoice==0.2.1`, installed --no-deps) and its codec decoder.

The package imports torchaudio, pydub and transformers' HiggsAudioV2TokenizerModel (transformers >= 5.3)
at module level; generation and decoding never use the first two, so the smallest stand-ins are
installed when the real modules are absent. The codec is the Higgs Audio v2 tokenizer's decoder side
built from transformers' DacModel (what the 5.x class does: RVQ lookup, fc2, the DAC decoder with
output_padding = stride % 2 and no tanh); the HiggsAudioV2TokenizerModel stand-in loads exactly that
from the checkpoint's audio_tokenizer/ (strictly), so the reference's own `generate` decodes with it.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path
from typing import Any


def _stub(name: str, **attrs: Any) -> None:
    if name in sys.modules:
        return
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    sys.modules[name] = module


def _missing(*_: Any, **__: Any) -> Any:
    raise RuntimeError("a stand-in module was called: the OmniVoice reference here has no torchaudio/pydub")


def install_stand_ins() -> None:
    """torchaudio, pydub (+ .silence) and transformers.HiggsAudioV2TokenizerModel where they are absent
    (transformers is imported first: it probes for torchaudio when it loads)."""
    import transformers

    if "torchaudio" not in sys.modules and importlib.util.find_spec("torchaudio") is None:
        _stub("torchaudio.functional", resample=_missing)
        _stub("torchaudio", functional=sys.modules["torchaudio.functional"], load=_missing)
    if "pydub" not in sys.modules and importlib.util.find_spec("pydub") is None:
        _stub("pydub.silence", detect_leading_silence=_missing, detect_nonsilent=_missing, split_on_silence=_missing)
        _stub("pydub", AudioSegment=_missing, silence=sys.modules["pydub.silence"])

    if not hasattr(transformers, "HiggsAudioV2TokenizerModel"):
        transformers.HiggsAudioV2TokenizerModel = CodecDecoder  # type: ignore[attr-defined]


def omnivoice_module() -> Any:
    """`omnivoice.models.omnivoice` (the stand-ins installed first)."""
    install_stand_ins()
    import omnivoice.models.omnivoice as module

    return module


def load_reference(checkpoint: Path) -> Any:
    """OmniVoice.from_pretrained(checkpoint) in eval mode, float32, on the CPU, its weights then loaded
    again strictly from model.safetensors (a missing or unexpected tensor raises)."""
    import torch
    from safetensors.torch import load_file

    module = omnivoice_module()
    model = module.OmniVoice.from_pretrained(str(checkpoint), dtype=torch.float32)
    model.load_state_dict(load_file(str(Path(checkpoint) / "model.safetensors")), strict=True)
    return model.eval()


def codec_modules(cfg: dict[str, Any]) -> Any:
    """The decoder side of a Higgs Audio v2 tokenizer config as modules named as its checkpoint's
    tensors (quantizer.quantizers.*, fc2, acoustic_decoder), torch's default init (codebooks zero)."""
    import torch
    from torch import nn

    from export.omnivoice.tiny import codec_hidden, dac_decoder, num_quantizers

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
    return module


def language_ids() -> dict[str, str]:
    """The reference's language map (lower-case language name -> its id), for the manifest."""
    omnivoice_module()
    from omnivoice.utils.lang_map import LANG_NAME_TO_ID

    return dict(sorted(LANG_NAME_TO_ID.items()))


class _Decoded:
    def __init__(self, audio_values: Any) -> None:
        self.audio_values = audio_values


class CodecDecoder:
    """The Higgs Audio v2 tokenizer's decoder side as a torch module (also the stand-in for
    transformers.HiggsAudioV2TokenizerModel: `from_pretrained`, `decode(codes [B, 8, T])`)."""

    def __init__(self, root: Path) -> None:
        import torch
        from safetensors.torch import load_file

        self.config_dict: dict[str, Any] = json.loads((Path(root) / "config.json").read_text())
        cfg = self.config_dict
        self.module: Any = codec_modules(cfg)
        self.module.load_state_dict(load_file(str(Path(root) / "model.safetensors")), strict=True)
        self.module.eval()
        self.device = torch.device("cpu")
        hop = 1
        for r in cfg["acoustic_model_config"]["downsampling_ratios"]:
            hop *= int(r)
        self.config = types.SimpleNamespace(frame_rate=-(-int(cfg["sample_rate"]) // hop), sample_rate=cfg["sample_rate"])

    @classmethod
    def from_pretrained(cls, path: str, **_: Any) -> CodecDecoder:
        return cls(Path(path))

    def quantized(self, codes: Any) -> Any:
        """codes [B, 8, T] -> fc2 input summed over the codebooks [B, T, hidden]."""
        import torch.nn.functional as F

        out = 0
        for i, q in enumerate(self.module.quantizer.quantizers):
            out = out + q.project_out(F.embedding(codes[:, i], q.codebook.embed))
        return out

    def decode_audio(self, codes: Any) -> Any:
        """codes [B, 8, T] -> audio [B, 1, T * hop]."""
        acoustic = self.module.fc2(self.quantized(codes)).transpose(1, 2)
        return self.module.acoustic_decoder(acoustic)

    def decode(self, codes: Any) -> _Decoded:
        import torch

        with torch.no_grad():
            return _Decoded(self.decode_audio(codes))


def reference_batch(model: Any, items: list[dict[str, Any]]) -> dict[str, Any]:
    """The first step's batch of the reference's `_generate_iterative` for `items` (each: text,
    target_len, and optional ref_text, ref_codes [8, T_ref], lang, instruct): the cond rows then the
    uncond rows, padded with the mask id, and its 4-D attention mask (a padded uncond position sees
    itself). Also the graph's inputs for the same batch: attention_mask [2B, S] and target_index."""
    import torch

    inputs = [model._prepare_inference_inputs(it["text"], it["target_len"], it.get("ref_text"), it.get("ref_codes"),
                                              it.get("lang"), it.get("instruct"), True) for it in items]
    b = len(items)
    c_lens = [int(i["input_ids"].shape[2]) for i in inputs]
    t_lens = [int(it["target_len"]) for it in items]
    s, t = max(c_lens), max(t_lens)
    c = int(model.config.num_audio_codebook)
    ids = torch.full((2 * b, c, s), int(model.config.audio_mask_id), dtype=torch.long)
    audio = torch.zeros((2 * b, s), dtype=torch.bool)
    mask4 = torch.zeros((2 * b, 1, s, s), dtype=torch.bool)
    mask2 = torch.zeros((2 * b, s), dtype=torch.long)
    target = torch.zeros((2 * b, t), dtype=torch.long)
    for i, inp in enumerate(inputs):
        cl, tl = c_lens[i], t_lens[i]
        ids[i, :, :cl] = inp["input_ids"][0]
        audio[i, :cl] = inp["audio_mask"][0]
        mask4[i, :, :cl, :cl] = True
        mask2[i, :cl] = 1
        target[i, :tl] = torch.arange(cl - tl, cl)
        ids[b + i, :, :tl] = inp["input_ids"][0, :, -tl:]
        audio[b + i, :tl] = inp["audio_mask"][0, -tl:]
        mask4[b + i, :, :tl, :tl] = True
        pad = torch.arange(tl, s)
        mask4[b + i, :, pad, pad] = True
        mask2[b + i, :tl] = 1
        target[b + i, :tl] = torch.arange(tl)
    return {"input_ids": ids, "audio_mask": audio, "mask4": mask4, "attention_mask": mask2, "target_index": target,
            "c_lens": c_lens, "t_lens": t_lens}


def reference_logits(model: Any, batch: dict[str, Any]) -> Any:
    """The reference forward over `reference_batch`'s batch, its logits gathered at target_index."""
    import torch

    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], audio_mask=batch["audio_mask"],
                       attention_mask=batch["mask4"]).logits.float()
    idx = batch["target_index"]
    return torch.gather(logits, 2, idx[:, None, :, None].expand(-1, logits.shape[1], -1, logits.shape[3]))
