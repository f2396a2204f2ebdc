"""The MOSS-Audio-Tokenizer-Nano codec checkpoint: writing a random one in the real layout (`write_codec`, called
by tiny.py for `<ckpt>/audio_tokenizer/`) and reading one (`load_codec`; the folder is
found by the runtime's `ttscore.runtime.families.moss_tts_nano.checkpoint.codec_dir`).

The real repository (OpenMOSS-Team/MOSS-Audio-Tokenizer-Nano) holds `config.json` (model_type
`moss-audio-tokenizer`), `model.safetensors.index.json` and `model-00001-of-00001.safetensors`, with the remote
code's tensor names: per projected transformer `{side}.{i}.input_proj.weight`, `.output_proj.weight` (always
both), `.transformer.layers.{l}.self_attn.in_projs.0.weight` / `out_projs.0.weight`, `norm1/norm2.{weight,bias}`,
`linear1/linear2.weight`, `layer_scale_1/2.scale`; the quantizer's weight-normalised 1x1 convolutions as
`parametrizations.weight.original0` (g) / `original1` (v) + `bias`, and `quantizers.{q}.codebook.weight`.

`--size real` gives the real dimensions: the stage layout (patches 240/2/2/2/4, transformer in/out widths) is
the published config's; the inner width (d_model 256, 4 heads, 3 layers, feed-forward 1024 per transformer) is
the one whose parameter count equals the model card's exactly (21,969,664: 10.45 M encoder, 10.45 M decoder,
1.07 M quantizer); the 10 s attention window is the config class default.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ttscore.contract.errors import CheckpointError
from ttscore.contract.moss_tts_nano import codec as spec

MODEL_TYPE = "moss-audio-tokenizer"
SHARD = "model-00001-of-00001.safetensors"
INDEX = "model.safetensors.index.json"

# (input_dimension, output_dimension) of each projected transformer, in order; patches between them.
_ENC_PATCHES = (240, 2, 2, 2, 4)
_ENC_WIDTHS = ((240, 384), (768, 384), (768, 384), (768, 192))
_DEC_PATCHES = (4, 2, 2, 2, 240)
_DEC_WIDTHS = ((192, 768), (384, 768), (384, 768), (384, 240))


def _transformer(width: tuple[int, int], d_model: int, heads: int, layers: int, ff: int) -> dict[str, Any]:
    return {"module_type": "Transformer", "input_dimension": width[0], "output_dimension": width[1],
            "d_model": d_model, "num_heads": heads, "num_layers": layers, "dim_feedforward": ff, "causal": True,
            "norm": "layer_norm", "positional_embedding": "rope", "max_period": 10000, "gating": "none",
            "layer_scale": 0.01, "conv_layout": True}


def _stack(patches: tuple[int, ...], widths: tuple[tuple[int, int], ...], dims: tuple[int, int, int, int]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    blocks = [_transformer(w, *dims) for w in widths]
    for p, t in zip(patches, [*blocks, None], strict=True):  # patch, T, patch, ..., T, patch
        out.append({"module_type": "PatchedPretransform", "patch_size": p})
        if t is not None:
            out.append(t)
    return out


def codec_config(size: str = "tiny", *, codebook_size: int | None = None,
                 context_seconds: float | None = None) -> dict[str, Any]:
    """config.json of a codec with the real key set: `real` dims, or `tiny` ones (width 16, 2 heads, 1 layer per
    transformer, a 0.1 s window so that a few frames cross it, codebook 16 unless `codebook_size`)."""
    if size not in ("tiny", "real"):
        raise ValueError(f"size must be tiny or real, got {size!r}")
    real = size == "real"
    dims = (256, 4, 3, 1024) if real else (16, 2, 1, 32)
    return {
        "architectures": ["MossAudioTokenizerModel"],
        "auto_map": {"AutoConfig": "configuration_moss_audio_tokenizer.MossAudioTokenizerConfig",
                     "AutoModel": "modeling_moss_audio_tokenizer.MossAudioTokenizerModel"},
        "model_type": MODEL_TYPE,
        "version": "nano",
        "sampling_rate": spec.SAMPLE_RATE,
        "downsample_rate": spec.SAMPLES_PER_FRAME,
        "causal_transformer_context_duration": context_seconds if context_seconds is not None else
        (10.0 if real else 0.1),
        "number_channels": spec.CHANNELS,
        "enable_channel_interleave": True,
        "attention_implementation": "sdpa",
        "compute_dtype": "fp32",
        "codec_weight_dtype": "fp32",
        "encoder_kwargs": _stack(_ENC_PATCHES, _ENC_WIDTHS, dims),
        "decoder_kwargs": _stack(_DEC_PATCHES, _DEC_WIDTHS, dims),
        "quantizer_type": "rlfq",
        "quantizer_kwargs": {"input_dim": 768, "rvq_dim": 512 if real else 24, "output_dim": 768,
                             "num_quantizers": spec.NUM_QUANTIZERS,
                             "codebook_size": codebook_size or (spec.CODEBOOK_SIZE if real else 16),
                             "codebook_dim": 8 if real else 4, "quantizer_type": "rlfq"},
        "dtype": "float32",
        "transformers_version": "4.57.1",
    }


# --- the tensor names a config implies ----------------------------------------------------------------


def _transformer_shapes(prefix: str, m: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    d, ff = int(m["d_model"]), int(m["dim_feedforward"])
    out: dict[str, tuple[int, ...]] = {f"{prefix}.input_proj.weight": (d, int(m["input_dimension"])),
                                       f"{prefix}.output_proj.weight": (int(m["output_dimension"]), d)}
    for layer in range(int(m["num_layers"])):
        p = f"{prefix}.transformer.layers.{layer}"
        out.update({f"{p}.self_attn.in_projs.0.weight": (3 * d, d), f"{p}.self_attn.out_projs.0.weight": (d, d),
                    f"{p}.norm1.weight": (d,), f"{p}.norm1.bias": (d,), f"{p}.norm2.weight": (d,),
                    f"{p}.norm2.bias": (d,), f"{p}.linear1.weight": (ff, d), f"{p}.linear2.weight": (d, ff)})
        if m.get("layer_scale") is not None:
            out.update({f"{p}.layer_scale_1.scale": (d,), f"{p}.layer_scale_2.scale": (d,)})
    return out


def _wn_shapes(prefix: str, out_ch: int, in_ch: int) -> dict[str, tuple[int, ...]]:
    return {f"{prefix}.parametrizations.weight.original0": (out_ch, 1, 1),
            f"{prefix}.parametrizations.weight.original1": (out_ch, in_ch, 1), f"{prefix}.bias": (out_ch,)}


def tensor_shapes(config: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """Every tensor of a codec checkpoint with this config, by its original name."""
    out: dict[str, tuple[int, ...]] = {}
    for side in ("encoder", "decoder"):
        for i, m in enumerate(config[f"{side}_kwargs"]):
            if m["module_type"] == "Transformer":
                out.update(_transformer_shapes(f"{side}.{i}", m))
    q = config["quantizer_kwargs"]
    inp, rvq, outd, cd = int(q["input_dim"]), int(q["rvq_dim"]), int(q["output_dim"]), int(q["codebook_dim"])
    if inp != rvq:
        out.update(_wn_shapes("quantizer.input_proj", rvq, inp))
    if rvq != outd:
        out.update(_wn_shapes("quantizer.output_proj", outd, rvq))
    for k in range(int(q["num_quantizers"])):
        p = f"quantizer.quantizers.{k}"
        if rvq != cd:
            out.update(_wn_shapes(f"{p}.in_proj", cd, rvq))
            out.update(_wn_shapes(f"{p}.out_proj", rvq, cd))
        out[f"{p}.codebook.weight"] = (int(q["codebook_size"]), cd)
    return out


# --- writing --------------------------------------------------------------------------------------------


def random_weights(config: Mapping[str, Any], seed: int = 0) -> dict[str, np.ndarray]:
    """Random float32 weights for `config`, drawn per tensor name (so a tensor does not change when another is
    added), scaled so that a tiny codec's signal neither vanishes nor explodes through the stack."""
    from export.tiny_weights import tensor_rng

    out: dict[str, np.ndarray] = {}
    for name, shape in tensor_shapes(config).items():
        rng = tensor_rng(seed, "moss_codec", name)
        if name.endswith(("norm1.weight", "norm2.weight")):
            arr = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name.endswith((".bias",)) and ".norm" in name:
            arr = 0.05 * rng.standard_normal(shape)
        elif name.endswith(".scale"):
            arr = rng.uniform(0.2, 0.6, shape)
        elif name.endswith("original0"):
            arr = rng.uniform(0.5, 1.5, shape)
        elif name.endswith(".bias"):
            arr = 0.05 * rng.standard_normal(shape)
        elif name.endswith("codebook.weight"):
            arr = rng.standard_normal(shape)
        else:  # a linear weight [out, in(, 1)]
            arr = rng.standard_normal(shape) / np.sqrt(shape[1])
        out[name] = np.asarray(arr, dtype=np.float32)
    return out


def write_codec(out: Path, size: str = "tiny", *, seed: int = 0, codebook_size: int | None = None,
                context_seconds: float | None = None, config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Write a random codec checkpoint into the folder `out` (created; e.g. `<ckpt>/audio_tokenizer`) in the real
    repository's layout; returns its config."""
    from safetensors.numpy import save_file

    from export.tiny_weights import json_bytes, write_files

    cfg = dict(config) if config is not None else codec_config(size, codebook_size=codebook_size,
                                                                 context_seconds=context_seconds)
    weights = random_weights(cfg, seed)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(out / SHARD), metadata={"format": "pt"})
    index = {"metadata": {"total_size": int(sum(w.nbytes for w in weights.values()))},
             "weight_map": {name: SHARD for name in sorted(weights)}}
    write_files(out, {"config.json": json_bytes(cfg), INDEX: json_bytes(index)})
    return cfg


def main(argv: list[str] | None = None) -> None:
    """`python -m export.moss_tts_nano.tiny_codec OUT [--size tiny|real] [--seed N]`: a codec checkpoint alone."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("out", type=Path)
    ap.add_argument("--size", choices=("tiny", "real"), default="tiny")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    write_codec(args.out, args.size, seed=args.seed)


# --- reading --------------------------------------------------------------------------------------------


def _weight_files(path: Path) -> list[Path]:
    if (path / "model.safetensors").is_file():
        return [path / "model.safetensors"]
    if (path / INDEX).is_file():
        index = json.loads((path / INDEX).read_text(encoding="utf-8"))
        return [path / f for f in sorted(set(index.get("weight_map", {}).values()))]
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{path}: no codec weights (model.safetensors, {INDEX} or *.safetensors)")
    return files


def load_codec(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(config, float32 weights by original name) of a codec directory; CheckpointError naming the missing,
    unexpected or misshapen tensors, or an unsupported config."""
    from safetensors.numpy import load_file

    path = Path(path)
    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: unreadable codec config.json: {exc}") from None
    if not isinstance(config, dict) or "encoder_kwargs" not in config or "decoder_kwargs" not in config:
        raise CheckpointError(f"{path}/config.json is not a MOSS audio tokenizer config (no encoder/decoder_kwargs)")
    weights: dict[str, np.ndarray] = {}
    for f in _weight_files(path):
        if not f.is_file():
            raise CheckpointError(f"{path}: the index names {f.name}, which is missing")
        weights.update({k: np.asarray(v, dtype=np.float32) for k, v in load_file(str(f)).items()})
    try:
        want = tensor_shapes(config)
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{path}/config.json: incomplete codec config ({exc})") from None
    missing = sorted(set(want) - set(weights))
    unexpected = sorted(set(weights) - set(want))
    if missing or unexpected:
        raise CheckpointError(f"{path}: codec weights do not match its config: {len(missing)} missing "
                              f"{missing[:5]}, {len(unexpected)} unexpected {unexpected[:5]}")
    bad = [f"{k} {list(weights[k].shape)} != {list(s)}" for k, s in want.items() if tuple(weights[k].shape) != s]
    if bad:
        raise CheckpointError(f"{path}: codec tensors of the wrong shape: {bad[:5]}")
    return config, weights


if __name__ == "__main__":
    main()
