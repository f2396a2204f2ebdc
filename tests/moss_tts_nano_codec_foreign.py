"""A MOSS-Audio-Tokenizer-Nano codec checkpoint the project did not make: mlx-audio 0.6.2's own
`MossAudioTokenizer` built from its own `AudioTokenizerConfig` (other dimensions than the project's tiny codec:
another patch layout, three heads, two layers, per-module `context_duration`, another codebook), every parameter
drawn at random in mlx, saved under the original checkpoint names (mlx-audio's `ffn.0/2`, `in_proj`, `out_proj`
mapped back to `linear1/2`, `in_projs.0`, `out_projs.0`) as one `model.safetensors` (the other weights form), and
read back by mlx-audio's own loader with strict=True before it is kept.

`python moss_tts_nano_codec_foreign.py IN.npz OUT.npz <checkpoint dir>` writes `<dir>/audio_tokenizer/`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from refenv import serve


def _transformer(inp: int, out: int, context: float) -> dict[str, object]:
    return {"module_type": "Transformer", "input_dimension": inp, "output_dimension": out, "d_model": 24,
            "num_heads": 3, "num_layers": 2, "dim_feedforward": 40, "causal": True, "norm": "layer_norm",
            "positional_embedding": "rope", "max_period": 5000, "gating": "none", "layer_scale": 0.01,
            "conv_layout": True, "context_duration": context}


CONFIG = {
    "model_type": "moss-audio-tokenizer", "architectures": ["MossAudioTokenizerModel"], "sampling_rate": 48000,
    "downsample_rate": 3840, "causal_transformer_context_duration": 10.0, "number_channels": 2,
    "enable_channel_interleave": True, "quantizer_type": "rlfq",
    "encoder_kwargs": [{"module_type": "PatchedPretransform", "patch_size": 480}, _transformer(480, 40, 0.08),
                       {"module_type": "PatchedPretransform", "patch_size": 2}, _transformer(80, 8, 0.16),
                       {"module_type": "PatchedPretransform", "patch_size": 8}],
    "decoder_kwargs": [{"module_type": "PatchedPretransform", "patch_size": 8}, _transformer(8, 80, 0.16),
                       {"module_type": "PatchedPretransform", "patch_size": 2}, _transformer(40, 480, 0.08),
                       {"module_type": "PatchedPretransform", "patch_size": 480}],
    "quantizer_kwargs": {"input_dim": 64, "rvq_dim": 20, "output_dim": 64, "num_quantizers": 16,
                         "codebook_size": 32, "codebook_dim": 6},
}
BACK = ((".ffn.0.weight", ".linear1.weight"), (".ffn.2.weight", ".linear2.weight"),
        (".self_attn.in_proj.weight", ".self_attn.in_projs.0.weight"),
        (".self_attn.out_proj.weight", ".self_attn.out_projs.0.weight"))


def main(inputs: dict[str, np.ndarray], out: str) -> dict[str, np.ndarray]:
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_audio.codec.models.moss_audio_tokenizer import MossAudioTokenizer
    from mlx_audio.codec.models.moss_audio_tokenizer.moss_audio_tokenizer import AudioTokenizerConfig

    del inputs
    keys = {f"{side}.{i}.{p}.weight" for side in ("encoder", "decoder") for i in (1, 3)
            for p in ("input_proj", "output_proj")}
    model = MossAudioTokenizer(AudioTokenizerConfig.from_dict(CONFIG), projection_keys=keys)
    rng = np.random.default_rng(11)
    weights = {}
    for name, value in tree_flatten(model.parameters()):
        shape = tuple(value.shape)
        if name.endswith(("norm1.weight", "norm2.weight")):
            arr = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name.endswith(".scale"):
            arr = rng.uniform(0.2, 0.6, shape)
        elif name.endswith("original0"):
            arr = rng.uniform(0.5, 1.5, shape)
        elif name.endswith("bias"):
            arr = 0.05 * rng.standard_normal(shape)
        elif name.endswith("codebook.weight"):
            arr = rng.standard_normal(shape)
        else:
            arr = rng.standard_normal(shape) / np.sqrt(shape[1])
        for a, b in BACK:
            name = name.replace(a, b)
        weights[name] = mx.array(arr.astype(np.float32))
    folder = Path(out) / "audio_tokenizer"
    folder.mkdir(parents=True, exist_ok=True)
    mx.save_safetensors(str(folder / "model.safetensors"), weights, metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(CONFIG, indent=2) + "\n")
    MossAudioTokenizer.from_model_dir(out)  # its own loader, strict
    return {"tensors": np.array(len(weights))}


if __name__ == "__main__":
    serve(main)
