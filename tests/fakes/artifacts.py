"""Hand-made artifact directories for serving tests: tiny ONNX graphs that obey the GraphSpec
names of ttscore/contract/qwen3_tts.py, plus a manifest.json in the export format (format_version 1).

code2wav_stream: pcm[b, f*spf + k] = codes[b, f, 0] + 0.001 * position[b]; new_state = state + F
speaker_encoder: x_vector = mean over frames of mels @ W   (W: [128, embed_dim], fixed)
speech_encoder:  codes[b, f, g] = int(1000 * mean |audio frame f|) + g
These make scatter/gather mistakes visible (each row's output depends on its own inputs).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ttscore.contract import qwen3_tts as spec

GROUPS = 16
SPF = 1920
OPSET = 17


def _save(graph: onnx.GraphProto, path: Path) -> None:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def _i64(name: str, values: list[int]) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def code2wav_stream_graph(state_size: int, spf: int = SPF) -> onnx.GraphProto:
    nodes = [
        helper.make_node("Slice", ["codes", "s0", "s1", "s2"], ["c0"]),  # [B,F,1]
        helper.make_node("Cast", ["c0"], ["c0f"], to=TensorProto.FLOAT),
        helper.make_node("Expand", ["c0f", "spf_shape"], ["rep"]),  # [B,F,spf]
        helper.make_node("Reshape", ["rep", "flat"], ["pcm0"]),  # [B,F*spf]
        helper.make_node("Cast", ["position"], ["posf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["posf", "milli"], ["posm"]),
        helper.make_node("Unsqueeze", ["posm", "ax1"], ["pos2"]),  # [B,1]
        helper.make_node("Add", ["pcm0", "pos2"], ["pcm"]),
        helper.make_node("Shape", ["codes"], ["cshape"]),
        helper.make_node("Gather", ["cshape", "one"], ["nframes"]),
        helper.make_node("Cast", ["nframes"], ["nframesf"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["state", "nframesf"], ["new_state"]),
    ]
    inits = [
        _i64("s0", [0]), _i64("s1", [1]), _i64("s2", [2]),
        _i64("spf_shape", [1, 1, spf]), _i64("flat", [0, -1]), _i64("ax1", [1]),
        numpy_helper.from_array(np.array(1, dtype=np.int64), "one"),
        numpy_helper.from_array(np.array(0.001, dtype=np.float32), "milli"),
    ]
    return helper.make_graph(
        nodes,
        "code2wav_stream",
        [
            helper.make_tensor_value_info("codes", TensorProto.INT64, ["batch", "frames", GROUPS]),
            helper.make_tensor_value_info("state", TensorProto.FLOAT, ["batch", state_size]),
            helper.make_tensor_value_info("position", TensorProto.INT64, ["batch"]),
        ],
        [
            helper.make_tensor_value_info("pcm", TensorProto.FLOAT, ["batch", "samples"]),
            helper.make_tensor_value_info("new_state", TensorProto.FLOAT, ["batch", state_size]),
        ],
        inits,
    )


def speaker_encoder_graph(embed_dim: int) -> onnx.GraphProto:
    w = np.linspace(-1, 1, spec.MEL_BINS * embed_dim, dtype=np.float32).reshape(spec.MEL_BINS, embed_dim)
    nodes = [
        helper.make_node("ReduceMean", ["mels"], ["m"], axes=[1], keepdims=0),
        helper.make_node("MatMul", ["m", "w"], ["x_vector"]),
    ]
    return helper.make_graph(
        nodes,
        "speaker_encoder",
        [helper.make_tensor_value_info("mels", TensorProto.FLOAT, ["batch", "mel_frames", spec.MEL_BINS])],
        [helper.make_tensor_value_info("x_vector", TensorProto.FLOAT, ["batch", embed_dim])],
        [numpy_helper.from_array(w, "w")],
    )


def speech_encoder_graph(spf: int = SPF) -> onnx.GraphProto:
    # Like the real graph it takes any length: zero-pad to whole frames, ceil(samples / spf) frames.
    nodes = [
        helper.make_node("Shape", ["audio"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["n"]),  # [1] samples
        helper.make_node("Neg", ["n"], ["neg_n"]),
        helper.make_node("Mod", ["neg_n", "spf"], ["extra"], fmod=0),  # (-n) mod spf, non-negative
        helper.make_node("Concat", ["zeros3", "extra"], ["pads"], axis=0),  # [0,0,0,extra]
        helper.make_node("Pad", ["audio", "pads"], ["padded"]),
        helper.make_node("Reshape", ["padded", "frames_shape"], ["fr"]),  # [B,F,spf]
        helper.make_node("Abs", ["fr"], ["a"]),
        helper.make_node("ReduceMean", ["a"], ["m"], axes=[2], keepdims=1),  # [B,F,1]
        helper.make_node("Mul", ["m", "thousand"], ["m1"]),
        helper.make_node("Floor", ["m1"], ["m2"]),
        helper.make_node("Cast", ["m2"], ["mi"], to=TensorProto.INT64),
        helper.make_node("Add", ["mi", "groups"], ["codes"]),  # broadcast [B,F,16]
    ]
    return helper.make_graph(
        nodes,
        "speech_encoder",
        [helper.make_tensor_value_info("audio", TensorProto.FLOAT, ["batch", "samples"])],
        [helper.make_tensor_value_info("codes", TensorProto.INT64, ["batch", "frames", GROUPS])],
        [
            _i64("frames_shape", [0, -1, spf]),
            _i64("one", [1]),
            _i64("spf", [spf]),
            _i64("zeros3", [0, 0, 0]),
            numpy_helper.from_array(np.array(1000.0, dtype=np.float32), "thousand"),
            numpy_helper.from_array(np.arange(GROUPS, dtype=np.int64).reshape(1, 1, GROUPS), "groups"),
        ],
    )


def make_artifacts(out: Path, state_size: int = 8, embed_dim: int = 8, voice: bool = True) -> Path:
    """Write a dummy artifacts directory (code2wav_stream [+ voice-feature graphs]) to `out`."""
    out.mkdir(parents=True, exist_ok=True)
    graphs = {}
    s = spec.code2wav_stream_spec(GROUPS, state_size, SPF)
    _save(code2wav_stream_graph(state_size), out / s.filename)
    graphs[s.name] = s.to_json()
    if voice:
        for g, graph in (
            (spec.speaker_encoder_spec(spec.MEL_BINS, embed_dim), speaker_encoder_graph(embed_dim)),
            (spec.speech_encoder_spec(GROUPS), speech_encoder_graph()),
        ):
            _save(graph, out / g.filename)
            graphs[g.name] = g.to_json()
        filters = np.abs(np.random.default_rng(0).standard_normal((spec.MEL_BINS, spec.MEL_N_FFT // 2 + 1)))
        np.save(out / f"{spec.MEL_FILTERS}.npy", (filters / 100).astype(np.float32))
    manifest = {
        "format_version": 1, "family": "qwen3_tts", "variant": "base", "sample_rate": 24000, "samples_per_frame": 1920,
        "graphs": graphs, "code2wav": {"state_size": state_size},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return out
