"""OmniVoice's codec reference, run in the ref5 environment (transformers 5.14.1) through tests/refenv.py:
transformers' own HiggsAudioV2TokenizerModel loaded from a checkpoint's audio_tokenizer/.

The class requires torchaudio for one call (torchaudio.functional.resample, 24 -> 16 kHz before HuBERT);
no torchaudio build matches this torch, so a stand-in module provides that one function with
ttscore.runtime.sinc_resample (its kernel is bit-identical to torchaudio 2.11's, see
export/omnivoice/README.md). Everything else is the 5.x class as released.

`python omnivoice_codec_ref5.py IN.npz OUT.npz <audio_tokenizer dir> <command>`:
- load: from_pretrained must report no missing, unexpected or mismatched tensor; returns the tensor count.
- encode: inputs audio_0, audio_1, ... (each [N] float32, 24 kHz) -> codes_0, codes_1, ... [8, T]
  (model.encode(audio[None, None]).audio_codes[0]).
"""

from __future__ import annotations

import importlib.machinery
import sys
import types

import numpy as np
from refenv import serve

# transformers decides whether torchaudio exists when it is first imported: the stand-in below must be
# in place before that, so this script runs in a fresh interpreter, not from the worker's imports.
REFENV_FRESH_INTERPRETER = True


def _torchaudio_stand_in() -> None:
    import torch

    from ttscore.runtime.sinc_resample import resample

    def resample_fn(waveform: torch.Tensor, orig_freq: int, new_freq: int, **kwargs: object) -> torch.Tensor:
        if kwargs:
            raise RuntimeError(f"the torchaudio stand-in resamples with the defaults only, not {kwargs}")
        out = resample(waveform.detach().cpu().numpy().astype(np.float32), int(orig_freq), int(new_freq))
        return torch.from_numpy(out).to(waveform.dtype)

    functional = types.ModuleType("torchaudio.functional")
    functional.resample = resample_fn  # type: ignore[attr-defined]
    module = types.ModuleType("torchaudio")
    module.__spec__ = importlib.machinery.ModuleSpec("torchaudio", None)
    module.functional = functional  # type: ignore[attr-defined]
    sys.modules["torchaudio"] = module
    sys.modules["torchaudio.functional"] = functional


def main(inputs: dict[str, np.ndarray], root: str, command: str) -> dict[str, object]:
    _torchaudio_stand_in()
    import torch
    from transformers import HiggsAudioV2TokenizerModel

    model, info = HiggsAudioV2TokenizerModel.from_pretrained(root, output_loading_info=True, dtype=torch.float32)
    bad = {k: v for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v}
    if bad:
        raise AssertionError(f"HiggsAudioV2TokenizerModel does not load {root} strictly: {bad}")
    model.eval()
    if command == "load":
        return {"tensors": np.int64(len(model.state_dict()))}
    if command != "encode":
        raise SystemExit(f"unknown command {command!r}")
    out: dict[str, object] = {}
    with torch.no_grad():
        for key in sorted(k for k in inputs if k.startswith("audio_")):
            audio = torch.from_numpy(np.asarray(inputs[key], np.float32))[None, None]
            codes = model.encode(audio).audio_codes[0]
            out["codes_" + key.split("_", 1)[1]] = codes.numpy().astype(np.int64)
    return out


if __name__ == "__main__":
    serve(main)
