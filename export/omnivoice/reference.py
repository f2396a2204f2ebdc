"""The OmniVoice reference (`omnivoice==0.2.1`, installed --no-deps).

The package imports torchaudio, pydub and transformers' HiggsAudioV2TokenizerModel (transformers >= 5.3)
at module level; generation and decoding never use the first two, so the smallest stand-ins are
installed when the real modules are absent, and HiggsAudioV2TokenizerModel is export.omnivoice.codec's
`Codec` (the Higgs Audio v2 tokenizer as torch modules, loaded strictly from the checkpoint's
audio_tokenizer/), so the reference's own `generate` decodes with it.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

from export.omnivoice.codec import Codec


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
        transformers.HiggsAudioV2TokenizerModel = Codec  # type: ignore[attr-defined]


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


def language_ids() -> dict[str, str]:
    """The reference's language map (lower-case language name -> its id), for the manifest."""
    omnivoice_module()
    from omnivoice.utils.lang_map import LANG_NAME_TO_ID

    return dict(sorted(LANG_NAME_TO_ID.items()))


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
