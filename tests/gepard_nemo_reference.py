"""NeMo's own NanoCodec decoder (nemo-toolkit 3.0.0's `CausalHiFiGANDecoder`, from the release wheel's
source), run in ref5 through tests/refenv.py, as the reference of the project's port
(export/gepard/codec.py).

nemo-toolkit is not installed: its import of `nemo.collections.tts` pulls lightning, hydra, omegaconf,
lhotse and more. Only two of its files are executed, read from the wheel given as the script's
argument: `nemo/collections/common/parts/utils.py` (Snake, HalfSnake, ClampActivation,
mask_sequence_tensor) and `nemo/collections/tts/modules/audio_codec_modules.py`. The modules they
import but the decoder never calls get the smallest stand-ins: NeuralModule = torch.nn.Module,
`typecheck()` = no check, the neural-type names, the ASR/audio preprocessors, `nemo.utils.logging`, and
the two `einops.rearrange` patterns the decoder uses. transformers is the real one (ref5).

`python gepard_nemo_reference.py IN.npz OUT.npz <nemo wheel> <.nemo archive>`: codes [B, 32, T]
(per-dimension FSQ codes) -> audio [B, T * hop]: vLLM-Omni's `decode_from_codes` dequantization
((c - L//2) / (L//2) per dimension), then NeMo's `CausalHiFiGANDecoder` built from the archive's
model_config.yaml with `audio_decoder.*` of model_weights.ckpt loaded strictly.
"""

from __future__ import annotations

import io
import sys
import tarfile
import types
import zipfile

import numpy as np

FILES = {
    "nemo.collections.common.parts.utils": "nemo/collections/common/parts/utils.py",
    "nemo.collections.tts.modules.audio_codec_modules": "nemo/collections/tts/modules/audio_codec_modules.py",
}


def _module(name: str, **attrs: object) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    return mod


def _rearrange(x, pattern: str):  # the two patterns the decoder path uses
    if pattern == "B 1 T -> B T":
        return x[:, 0]
    if pattern.startswith("B -> B"):
        return x.reshape(x.shape[0], *([1] * (len(pattern.split("->")[1].split()) - 1)))
    raise NotImplementedError(pattern)


def install_stand_ins() -> None:
    import logging

    import torch

    _module("einops", rearrange=_rearrange)
    for pkg in ("nemo", "nemo.collections", "nemo.collections.common", "nemo.collections.common.parts",
                "nemo.collections.tts", "nemo.collections.tts.modules", "nemo.collections.audio",
                "nemo.collections.audio.parts", "nemo.collections.audio.parts.utils", "nemo.core",
                "nemo.core.classes", "nemo.core.neural_types"):
        _module(pkg, __path__=[])
    _module("nemo.collections.asr.modules", AudioToMelSpectrogramPreprocessor=object)
    _module("nemo.collections.audio.parts.utils.transforms", MelSpectrogram=object, Resample=object)
    _module("nemo.core.classes.common", typecheck=lambda *a, **k: (lambda fn: fn))
    _module("nemo.core.classes.module", NeuralModule=torch.nn.Module)
    names = ("AudioSignal", "EncodedRepresentation", "LengthsType", "MelSpectrogramType", "TokenIndex", "VoidType",
             "LogitsType", "LossType", "LabelsType")
    _module("nemo.core.neural_types.elements", **{n: type(n, (), {"__init__": lambda self, *a, **k: None})
                                                 for n in names})
    _module("nemo.core.neural_types.neural_type", NeuralType=lambda *a, **k: None)
    _module("nemo.utils", logging=logging.getLogger("nemo"))


def load_nemo_modules(wheel: str, where: str) -> types.ModuleType:
    """The two files extracted under `where` (TorchScript's `snake` needs its source on disk) and
    imported under their own module names."""
    import importlib.util

    install_stand_ins()
    with zipfile.ZipFile(wheel) as zf:
        for name, path in FILES.items():
            zf.extract(path, where)
            spec = importlib.util.spec_from_file_location(name, f"{where}/{path}")
            assert spec is not None and spec.loader is not None
            mod = importlib.util.module_from_spec(spec)
            sys.modules[name] = mod
            spec.loader.exec_module(mod)
    return sys.modules["nemo.collections.tts.modules.audio_codec_modules"]


def load_decoder(wheel: str, where: str, archive: str):
    """NeMo's CausalHiFiGANDecoder of the .nemo `archive` (its `audio_decoder.*` weights loaded strictly), the
    FSQ scale per code dimension and the group count of its vector quantizer."""
    import torch
    import yaml

    modules = load_nemo_modules(wheel, where)
    with tarfile.open(archive, "r:*") as tar:
        files = {m.name.lstrip("./"): tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    cfg = yaml.safe_load(files["model_config.yaml"])
    state = torch.load(io.BytesIO(files["model_weights.ckpt"]), map_location="cpu", weights_only=True)
    kwargs = {k: v for k, v in cfg["audio_decoder"].items() if k != "_target_"}
    decoder = modules.CausalHiFiGANDecoder(**kwargs).eval()
    own = {k[len("audio_decoder."):]: v for k, v in state.items() if k.startswith("audio_decoder.")}
    decoder.load_state_dict(own, strict=True)
    vq = cfg["vector_quantizer"]
    scale = torch.tensor([v // 2 for v in vq["num_levels_per_group"]], dtype=torch.float32)
    return decoder, scale, int(vq["num_groups"])


def decode(decoder, scale, groups: int, codes):
    """codes [B, 32, T] (torch) -> (audio, audio_len): vLLM-Omni's dequantization, then the decoder."""
    import torch

    parts = codes.chunk(groups, dim=1)
    dequantized = torch.cat([(g - scale[None, :, None]) / scale[None, :, None] for g in parts], dim=1)
    lengths = torch.full((codes.shape[0],), codes.shape[2], dtype=torch.long)
    with torch.inference_mode():
        return decoder(inputs=dequantized, input_len=lengths)


def main(inputs: dict, wheel: str, archive: str) -> dict:
    import os

    import torch

    decoder, scale, groups = load_decoder(wheel, os.getcwd(), archive)  # refenv's temporary working directory
    audio, audio_len = decode(decoder, scale, groups, torch.from_numpy(inputs["codes"]))
    return {"audio": audio.numpy(), "audio_len": audio_len.numpy(), "names": np.array(sorted(decoder.state_dict()))}


if __name__ == "__main__":
    from refenv import serve

    serve(main)
