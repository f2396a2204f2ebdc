"""MOSS-Audio-Tokenizer-Nano's second oracle: vLLM-Omni 0.30.0's vendored torch codec
(`vllm_omni/model_executor/models/moss_tts/audio_tokenizer_v2.py` with its configuration module), read from the
release wheel without vLLM and run in "ref5" through refenv (plain torch + transformers 5.x, no stubs).

`python moss_tts_nano_codec_vllm.py IN.npz OUT.npz <wheel> <codec dir>`: `MossAudioTokenizerModel` built from the
codec's config.json and loaded with `load_state_dict(strict=True)` from its safetensors (one
`model.safetensors`, or the index and its shards). IN.npz holds `audio_i`
[samples] mono at 48 kHz -> `codes_i` [frames, 16] (`encode` of the clip repeated to two channels) and `codes_j`
[frames, 16] -> `whole_j` [samples, 2] (`decode` of the whole utterance).
"""

from __future__ import annotations

import importlib
import json
import shutil
import sys
import tempfile
import types
from pathlib import Path

import numpy as np
from refenv import serve
from vllm_omni_stubs import extract

PACKAGE = "vllm_omni/model_executor/models/moss_tts"


def main(inputs: dict[str, np.ndarray], wheel: str, codec: str) -> dict[str, np.ndarray]:
    import torch
    from safetensors.torch import load_file

    where = tempfile.mkdtemp(prefix="moss-codec-")
    extract(wheel, where, (f"{PACKAGE}/audio_tokenizer_v2.py", f"{PACKAGE}/configuration_moss_audio_tokenizer_v2.py"))
    pkg = types.ModuleType("moss_codec_ref")
    pkg.__path__ = [str(Path(where) / PACKAGE)]
    sys.modules["moss_codec_ref"] = pkg
    conf = importlib.import_module("moss_codec_ref.configuration_moss_audio_tokenizer_v2")
    mod = importlib.import_module("moss_codec_ref.audio_tokenizer_v2")
    shutil.rmtree(where, ignore_errors=True)  # imported: the extracted sources are no longer read

    root = Path(codec)
    cfg = json.loads((root / "config.json").read_text())
    cfg.pop("auto_map", None)
    model = mod.MossAudioTokenizerModel(conf.MossAudioTokenizerConfig(**cfg)).eval()
    files = ["model.safetensors"] if (root / "model.safetensors").is_file() else sorted(
        set(json.loads((root / "model.safetensors.index.json").read_text())["weight_map"].values()))
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(str(root / f)))
    model.load_state_dict(state, strict=True)
    out: dict[str, np.ndarray] = {}
    with torch.inference_mode():
        for key, value in inputs.items():
            kind, _, i = key.partition("_")
            if kind == "audio":
                x = torch.from_numpy(np.asarray(value, np.float32))[None, None].repeat(1, 2, 1)
                enc = model.encode(x, return_dict=True)
                n = int(enc.audio_codes_lengths[0])
                out[f"codes_{i}"] = enc.audio_codes[:, 0, :n].T.numpy().astype(np.int64)
            elif kind == "codes":
                codes = torch.from_numpy(value.astype(np.int64)).T[:, None, :]
                dec = model.decode(codes, return_dict=True)
                out[f"whole_{i}"] = dec.audio[0].T.numpy().astype(np.float32)
    return out


if __name__ == "__main__":
    serve(main)
