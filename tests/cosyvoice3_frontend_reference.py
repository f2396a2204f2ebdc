"""CosyVoice3's reference-clip features as vLLM-Omni 0.30.0 computes them (`cosyvoice3/utils.py`:
`load_wav`, `mel_spectrogram` with the yaml's feat_extractor values, `log_mel_spectrogram`, and
`extract_spk_embedding`'s fbank), run in "main" through refenv.

torchaudio cannot be installed beside this torch build (its compiled extension is tied to its own torch),
so its pure-torch code is read from the release wheel `make setup` downloads into .venv-ref5/wheels/
(`torchaudio-2.11.1`): `compliance/kaldi.py` (fbank) and `functional/functional.py`
(`_get_sinc_resample_kernel`, `_apply_sinc_resample_kernel`: what `transforms.Resample` runs, its kernel in
float64 when no dtype is given), with `torchaudio._extension` a shell saying the extension is absent.
`vllm_omni.utils.audio.mel_filter_bank` is librosa.filters.mel (the function says it is librosa's drop-in).

`python cosyvoice3_frontend_reference.py IN.npz OUT.npz <vllm-omni wheel> <torchaudio wheel>`; inputs wav_i,
sr_i -> mel24_i [frames, 80], fbank16_i [frames, 80] (mean removed), whisper_i [128, frames] (of the 16 kHz
resampled clip), wav16_i, wav24_i.
"""

from __future__ import annotations

import importlib
import logging
import math
import os
import sys
import types
import zipfile

import numpy as np


def _module(name: str, path: list[str] | None = None, **attrs: object) -> types.ModuleType:
    mod = types.ModuleType(name)
    if path is not None:
        mod.__path__ = path  # type: ignore[attr-defined]
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    return mod


def load(vllm_wheel: str, ta_wheel: str, where: str) -> dict:
    import librosa
    import torch

    with zipfile.ZipFile(vllm_wheel) as zf:
        zf.extract("vllm_omni/model_executor/models/cosyvoice3/utils.py", where)
    with zipfile.ZipFile(ta_wheel) as zf:
        for name in ("torchaudio/compliance/kaldi.py", "torchaudio/functional/functional.py",
                     "torchaudio/functional/filtering.py"):
            zf.extract(name, where)
    ta = _module("torchaudio", [os.path.join(where, "torchaudio")])
    _module("torchaudio._extension", _IS_TORCHAUDIO_EXT_AVAILABLE=False)
    _module("torchaudio.functional", [os.path.join(where, "torchaudio", "functional")])
    _module("torchaudio.compliance", [os.path.join(where, "torchaudio", "compliance")])
    functional = importlib.import_module("torchaudio.functional.functional")
    kaldi = importlib.import_module("torchaudio.compliance.kaldi")

    class Resample(torch.nn.Module):
        """torchaudio.transforms.Resample's defaults (sinc_interp_hann, width 6, rolloff 0.99, dtype None)."""

        def __init__(self, orig_freq: int, new_freq: int) -> None:
            super().__init__()
            self.orig, self.new = int(orig_freq), int(new_freq)
            self.gcd = math.gcd(self.orig, self.new)
            self.kernel, self.width = functional._get_sinc_resample_kernel(
                self.orig, self.new, self.gcd, 6, 0.99, "sinc_interp_hann", None)

        def forward(self, x):
            return functional._apply_sinc_resample_kernel(x, self.orig, self.new, self.gcd, self.kernel, self.width)

    ta.transforms = _module("torchaudio.transforms", Resample=Resample)  # type: ignore[attr-defined]
    ta.compliance = sys.modules["torchaudio.compliance"]  # type: ignore[attr-defined]
    ta.compliance.kaldi = kaldi  # type: ignore[attr-defined]

    def mel_filter_bank(sr, n_fft, n_mels, fmin=0.0, fmax=None):
        return torch.from_numpy(librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels, fmin=fmin, fmax=fmax))

    for pkg in ("vllm_omni", "vllm_omni.model_executor", "vllm_omni.model_executor.models", "vllm_omni.utils"):
        _module(pkg, [])
    _module("vllm_omni.model_executor.models.cosyvoice3",
            [os.path.join(where, "vllm_omni", "model_executor", "models", "cosyvoice3")])
    _module("vllm_omni.utils.audio", mel_filter_bank=mel_filter_bank)
    logging.getLogger().setLevel(logging.ERROR)
    utils = importlib.import_module("vllm_omni.model_executor.models.cosyvoice3.utils")
    return {"utils": utils, "kaldi": kaldi}


FEAT = {"n_fft": 1920, "num_mels": 80, "sampling_rate": 24000, "hop_size": 480, "win_size": 1920, "fmin": 0,
        "fmax": None, "center": False}  # cosyvoice3.yaml's feat_extractor (vLLM-Omni's config.feat_extractor)


def main(inputs: dict, vllm_wheel: str, ta_wheel: str) -> dict:
    from functools import partial

    import torch

    mods = load(vllm_wheel, ta_wheel, os.getcwd())
    u, kaldi = mods["utils"], mods["kaldi"]
    out: dict = {}
    i = 0
    while f"wav_{i}" in inputs:
        wav, sr = inputs[f"wav_{i}"].astype(np.float32), int(inputs[f"sr_{i}"])
        clip = (wav, sr)
        feat, _ = u.extract_speech_feat(clip, partial(u.mel_spectrogram, **FEAT), "cpu")
        out[f"mel24_{i}"] = feat[0].numpy()
        speech16 = u.load_wav(clip, 16000)
        fb = kaldi.fbank(speech16, num_mel_bins=80, dither=0, sample_frequency=16000)
        out[f"fbank16_{i}"] = (fb - fb.mean(dim=0, keepdim=True)).numpy()
        out[f"whisper_{i}"] = u.log_mel_spectrogram(speech16[0], n_mels=128).numpy()
        out[f"wav16_{i}"] = speech16[0].numpy()
        out[f"wav24_{i}"] = u.load_wav(clip, 24000)[0].numpy()
        i += 1
    torch.set_num_threads(1)
    return out


if __name__ == "__main__":
    from refenv import serve

    serve(main)
