"""Bounded export memory (issue 14): staged weights, weights bound one at a time, per-stage peaks.

- StagedReference builds exactly the model `load_reference` (Qwen3TTSModel.from_pretrained) builds,
  loads only the weights a stage names and puts them back on the meta device afterwards;
- a graph traced without its parameters and bound by `bind_weights` carries the module's weights
  (transposed where nn.Linear multiplies by the transpose), page-aligned in `<file>.data` when large;
- `replace_graph` moves a graph with its external data and leaves no orphaned weights;
- MemoryMonitor sees a stage's allocation, and export writes every stage's peak into the manifest.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from export.memory import GIB, MemoryMonitor, peak_rss_bytes, rss_bytes  # noqa: E402
from ttscore.contract.errors import CheckpointError  # noqa: E402

pytestmark = pytest.mark.export


@pytest.fixture(scope="module")
def tiny_ckpts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from export.qwen3_tts.tiny import make_tiny

    root = tmp_path_factory.mktemp("staged")
    return {v: make_tiny(v, root / v) for v in ("custom_voice", "voice_design", "base")}


@pytest.fixture(scope="module")
def tiny_graphs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, dict[str, Path]]:
    """tiny_model(32) and its talker and code predictor graphs, exported once (unvalidated: the export tests
    validate them) for the tests below that read or quantize them."""
    from test_export_talker import tiny_model

    from export.qwen3_tts.talker import export_code_predictor, export_talker

    model = tiny_model(32)  # with the small_to_mtp projection
    graphs = {}
    for graph, export in (("talker", export_talker), ("code_predictor", export_code_predictor)):
        out = tmp_path_factory.mktemp(graph)
        graphs[graph] = out / export(model, out, validate=False)["file"]
    return model, graphs


# ---- StagedReference -------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", ["custom_voice", "voice_design", "base"])
def test_staged_reference_is_the_from_pretrained_model(tiny_ckpts: dict[str, Path], variant: str) -> None:
    from export.qwen3_tts.reference import (
        CODE_PREDICTOR_WEIGHTS,
        SPEAKER_ENCODER_WEIGHTS,
        TABLE_WEIGHTS,
        TALKER_WEIGHTS,
        StagedReference,
        load_reference,
    )

    want = load_reference(tiny_ckpts[variant]).model
    staged = StagedReference(tiny_ckpts[variant])
    model = staged.model
    assert all(p.is_meta for p in model.parameters())  # nothing is read until a stage asks
    # Buffers (RoPE inverse frequencies) are computed by the constructors, as from_pretrained does.
    want_buffers = dict(want.named_buffers())
    assert set(dict(model.named_buffers())) == set(want_buffers)
    for name, buf in model.named_buffers():
        assert torch.equal(buf, want_buffers[name]), name
    for got_cfg, want_cfg in ((model.config, want.config), (model.talker.config, want.talker.config),
                              (model.talker.code_predictor.config, want.talker.code_predictor.config)):
        assert got_cfg._attn_implementation == want_cfg._attn_implementation == "eager"

    want_params = dict(want.named_parameters())
    stages = [TALKER_WEIGHTS, CODE_PREDICTOR_WEIGHTS, TABLE_WEIGHTS]
    if variant == "base":
        stages.append(SPEAKER_ENCODER_WEIGHTS)
    covered: set[str] = set()
    for prefixes in stages:
        with staged.loaded(prefixes) as m:
            for name, p in m.named_parameters():
                if name.startswith(prefixes):
                    assert p.dtype == torch.float32 and torch.equal(p, want_params[name]), name
                    covered.add(name)
                else:
                    assert p.is_meta, f"{name} was loaded for {prefixes}"
        assert all(p.is_meta for p in model.parameters()), f"weights of {prefixes} stayed loaded"
    assert covered == set(want_params), "some weights belong to no export stage"

    with staged.speech_tokenizer() as st:
        want_st = dict(want.speech_tokenizer.model.state_dict())
        got_st = st.state_dict()
        assert set(got_st) == set(want_st)
        assert all(torch.equal(got_st[k], want_st[k]) for k in want_st)


def test_staged_reference_refuses_incomplete_checkpoints(tiny_ckpts: dict[str, Path], tmp_path: Path) -> None:
    import shutil

    from safetensors.torch import load_file, save_file

    from export.qwen3_tts.reference import TALKER_WEIGHTS, StagedReference

    src = tiny_ckpts["custom_voice"]
    ckpt = tmp_path / "ckpt"
    shutil.copytree(src, ckpt)
    weights = load_file(str(src / "model.safetensors"))
    missing = "talker.model.layers.1.mlp.down_proj.weight"
    save_file({k: v for k, v in weights.items() if k != missing}, str(ckpt / "model.safetensors"))
    staged = StagedReference(ckpt)
    with pytest.raises(CheckpointError, match="missing"), staged.loaded(TALKER_WEIGHTS):
        pass
    assert all(p.is_meta for p in staged.model.parameters())

    save_file({**weights, "talker.model.layers.0.extra_buffer": torch.zeros(3)}, str(ckpt / "model.safetensors"))
    with pytest.raises(CheckpointError, match="unexpected"), StagedReference(ckpt).loaded(TALKER_WEIGHTS):
        pass


# ---- bind_weights / replace_graph ------------------------------------------------------------------
def _initializers(path: Path) -> dict[str, np.ndarray]:
    model = onnx.load(str(path), load_external_data=True)
    return {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}


def test_bound_weights_are_the_module_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every weight of the talker reaches the graph once (transposed for MatMul), page-aligned in
    one `.data` file when the graph is large; no weight is left as a graph input."""
    from test_export_talker import tiny_model

    import export.tracing
    from export.qwen3_tts.talker import TalkerStep, export_talker, talker_graph_spec

    model = tiny_model(64)
    monkeypatch.setattr(export.tracing, "EXTERNAL_DATA_THRESHOLD", 1000)
    rep = export_talker(model, tmp_path)
    path = tmp_path / rep["file"]
    proto = onnx.load(str(path), load_external_data=False)
    assert [i.name for i in proto.graph.input] == talker_graph_spec(model).input_names
    offsets = [
        int(e.value) for t in proto.graph.initializer for e in t.external_data if e.key == "offset"
    ]
    assert offsets and all(o % 4096 == 0 for o in offsets)

    inits = _initializers(path)
    found = set()
    for name, w in TalkerStep(model).state_dict().items():
        w = w.numpy()
        hits = [k for k, v in inits.items() if v.shape == w.shape and np.array_equal(v, w)]
        hits += [k for k, v in inits.items() if w.ndim == 2 and v.shape == w.T.shape and np.array_equal(v, w.T)]
        # identical weights (e.g. RMSNorm scales of ones) may be shared by the exporter's deduplication
        assert hits, f"{name} is not in the graph"
        found.update(hits)
    assert found == set(inits) - {k for k, v in inits.items() if v.size <= 1}


def test_weights_used_at_every_code_group_are_stored_once(tiny_graphs: tuple[Any, dict[str, Path]]) -> None:
    """The code predictor runs its layers once per code group (15 times per frame): each weight
    must still be stored once (a 1.7B export once wrote 5.2 GB for its 0.7 GB of weights)."""
    from export.qwen3_tts.talker import CodePredictorFrame

    model, graphs = tiny_graphs
    inits = _initializers(graphs["code_predictor"])
    weights = CodePredictorFrame(model).state_dict()
    stored = sum(v.nbytes for v in inits.values())
    assert stored <= sum(w.numel() * 4 for w in weights.values()) + 64 * 1024, (stored, len(inits))


def test_replace_graph_moves_external_data_and_drops_the_old(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from onnx import TensorProto, helper, numpy_helper

    import export.tracing
    from export.tracing import replace_graph, save_onnx

    def graph(value: float) -> Any:
        w = numpy_helper.from_array(np.full((64, 64), value, np.float32), "w")
        g = helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], [w],
        )
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])

    def run(path: Path) -> np.ndarray:
        return ort.InferenceSession(str(path)).run(None, {"x": np.ones((1, 64), np.float32)})[0]

    dst, src = tmp_path / "talker.onnx", tmp_path / "talker.int8.onnx"
    with monkeypatch.context() as m:
        m.setattr(export.tracing, "EXTERNAL_DATA_THRESHOLD", 0)  # both graphs keep their weights in .data
        save_onnx(graph(1.0), dst)
        save_onnx(graph(2.0), src)
    assert (tmp_path / "talker.int8.onnx.data").exists() and (tmp_path / "talker.onnx.data").exists()
    replace_graph(src, dst)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["talker.onnx", "talker.onnx.data"]
    assert np.allclose(run(dst), 128.0)

    save_onnx(graph(3.0), src)  # inline, replacing a graph that has external data: the old weights go
    replace_graph(src, dst)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["talker.onnx"]
    assert np.allclose(run(dst), 192.0)


def _assert_same_outputs(s_a: Any, s_b: Any, graph: str) -> None:
    """Both sessions give equal outputs for one feed: every dynamic axis 3, random inputs (seeded), masks all
    ones (the talker's: 3 new tokens over 3 past, so it spans both)."""
    rng = np.random.default_rng(0)
    feed: dict[str, np.ndarray] = {}
    for inp in s_a.get_inputs():
        shape = [d if isinstance(d, int) else 3 for d in inp.shape]
        if inp.name == "attention_mask":
            feed[inp.name] = np.ones(shape, np.int64)
        elif inp.type == "tensor(int64)":
            feed[inp.name] = rng.integers(0, 8, size=shape).astype(np.int64)
        elif inp.type == "tensor(bool)":
            feed[inp.name] = np.zeros(shape, bool)
        else:
            feed[inp.name] = rng.random(shape, dtype=np.float32)
    if graph == "talker":
        feed["attention_mask"] = np.ones((3, 6), np.int64)
    for x, y in zip(s_a.run(None, feed), s_b.run(None, feed), strict=True):
        assert np.array_equal(x, y)


@pytest.mark.parametrize("graph", ["talker", "code_predictor"])
def test_streaming_int8_is_what_quantize_dynamic_makes(tmp_path: Path, graph: str,
        tiny_graphs: tuple[Any, dict[str, Path]]) -> None:
    """quantize_matmuls (one weight in memory at a time) gives onnxruntime's quantize_dynamic
    result: the same nodes, the same int8 weights and scales, the same outputs bit for bit."""
    import collections

    from onnxruntime.quantization import QuantType, quantize_dynamic

    from export.quantize import optimize_basic, quantize_matmuls

    _, graphs = tiny_graphs
    optimized = optimize_basic(graphs[graph], tmp_path / "basic.onnx")
    theirs, ours = tmp_path / "theirs.onnx", tmp_path / "ours.onnx"
    quantize_dynamic(str(optimized), str(theirs), weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"],
                     per_channel=False, extra_options={"MatMulConstBOnly": True})
    quantize_matmuls(optimized, ours)

    a, b = onnx.load(str(theirs)), onnx.load(str(ours))
    assert collections.Counter(n.op_type for n in a.graph.node) == collections.Counter(n.op_type for n in b.graph.node)
    assert sum(n.op_type == "MatMulInteger" for n in b.graph.node) >= 4
    want = {t.name: onnx.numpy_helper.to_array(t) for t in a.graph.initializer}
    got = {t.name: onnx.numpy_helper.to_array(t) for t in b.graph.initializer}
    assert set(got) == set(want)
    for name, value in want.items():
        assert got[name].dtype == value.dtype and np.array_equal(got[name], value), name

    _assert_same_outputs(ort.InferenceSession(str(theirs)), ort.InferenceSession(str(ours)), graph)


@pytest.mark.parametrize("graph", ["talker", "code_predictor"])
def test_streaming_int8_blocks_are_what_the_nbits_quantizer_makes(tmp_path: Path, graph: str,
        tiny_graphs: tuple[Any, dict[str, Path]]) -> None:
    """quantize_matmuls(block_size=...) (one weight in memory at a time) computes what onnxruntime's
    MatMulNBitsQuantizer(bits=8, symmetric, accuracy_level 4) makes of the same graph, bit for bit,
    with fewer nodes: the MatMuls that share an activation (q/k/v, gate/up) are one MatMulNBits over
    their weights side by side (each stored once however many passes use it) and a Split."""
    import logging

    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig,
        MatMulNBitsQuantizer,
    )

    from export.quantize import optimize_basic, quantize_matmuls

    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
    model, graphs = tiny_graphs
    optimized = optimize_basic(graphs[graph], tmp_path / "basic.onnx")
    ours = tmp_path / "ours.onnx"
    quantize_matmuls(optimized, ours, block_size=16)  # K = 32 and 64 here: two and more blocks per column
    quantizer = MatMulNBitsQuantizer(onnx.load(str(optimized)), algo_config=DefaultWeightOnlyQuantConfig(
        block_size=16, is_symmetric=True, accuracy_level=4, bits=8))
    quantizer.process()
    a, b = quantizer.model.model, onnx.load(str(ours))

    theirs_n = [n for n in a.graph.node if n.op_type == "MatMulNBits"]
    ours_n = [n for n in b.graph.node if n.op_type == "MatMulNBits"]
    layers = model.talker.config.num_hidden_layers if graph == "talker" else None
    if layers is not None:  # 7 MatMuls per layer + the codec head -> 4 per layer + 1
        assert (len(theirs_n), len(ours_n)) == (7 * layers + 1, 4 * layers + 1)
    assert 4 <= len(ours_n) < len(theirs_n)
    for n in ours_n:
        attrs = {x.name: x.i for x in n.attribute}
        assert (attrs["bits"], attrs["block_size"], attrs["accuracy_level"]) == (8, 16, 4)
    weights = {t.name for t in b.graph.initializer}
    assert not [n for n in b.graph.node if n.op_type == "MatMul" and n.input[1] in weights]  # every one rewritten
    if graph == "code_predictor":  # its unrolled passes share one stored copy of each weight
        assert len({n.input[1] for n in ours_n}) < len(ours_n)

    _assert_same_outputs(ort.InferenceSession(a.SerializeToString()), ort.InferenceSession(str(ours)), graph)


# ---- MemoryMonitor ---------------------------------------------------------------------------------
@pytest.mark.unit
def test_memory_monitor_sees_a_stage_allocation() -> None:
    size = 512 << 20
    with MemoryMonitor() as mon:
        with mon.stage("small"):
            pass
        with mon.stage("alloc") as record:
            block = np.ones(size // 8)  # touched: resident, not just reserved
            record["bytes"] = float(block.nbytes)
            del block
        with mon.stage("after"):
            pass
    alloc = mon.stages["alloc"]
    # Most of it: the records are rounded to 10 MB, and a loaded CI worker can lose some of its file-backed pages
    # (mapped libraries, weights) while the block is made (256 MB once read as 215 MB more than at the start).
    assert alloc["peak_rss_gib"] - alloc["start_rss_gib"] >= 0.75 * size / GIB
    assert alloc["bytes"] == size
    assert mon.stages["after"]["peak_rss_gib"] < alloc["peak_rss_gib"]
    summary = mon.summary()
    assert summary["peak_stage"] == "alloc"
    assert summary["process_peak_rss_gib"] >= alloc["peak_rss_gib"]
    assert 0 < rss_bytes() <= peak_rss_bytes()


def test_export_reports_peak_memory_per_stage(tiny_custom_voice: Any) -> None:
    _, art, _ = tiny_custom_voice
    memory = json.loads((Path(art) / "manifest.json").read_text())["export"]
    stages = memory["stages"]
    assert list(stages) == ["load", "talker", "code_predictor", "tables", "code2wav"]
    for rec in stages.values():
        assert 0 < rec["start_rss_gib"] <= rec["peak_rss_gib"] and rec["end_rss_gib"] <= rec["peak_rss_gib"]
        assert rec["seconds"] >= 0
    assert memory["peak_stage"] in stages
    assert memory["process_peak_rss_gib"] >= max(r["peak_rss_gib"] for r in stages.values())


def test_quantize_graph_only_the_named_matmuls(tmp_path: Path) -> None:
    """quantize_graph(only=(pattern, what)): the MatMuls whose node names match become MatMulInteger, the others stay
    float MatMuls, and the manifest's method names the scope."""
    from onnx import TensorProto, helper, numpy_helper

    from export.quantize import INT8_METHOD, compare_outputs, quantize_graph
    from export.tracing import save_onnx

    rng = np.random.default_rng(0)
    ws = [numpy_helper.from_array(rng.standard_normal((32, 32)).astype(np.float32) * 0.1, f"w{i}") for i in range(2)]
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w0"], ["h"], name="/layers.0/MatMul"),
         helper.make_node("MatMul", ["h", "w1"], ["y"], name="/output_proj/MatMul")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 32])], ws)
    path = save_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), tmp_path / "g.onnx")
    feeds = [{"x": rng.standard_normal((4, 32)).astype(np.float32)}]
    got = quantize_graph(path, "int8", lambda a, b: compare_outputs(a, b, feeds), only=(r"/layers\.\d+/", "layers"))
    assert got["quantized"] == f"{INT8_METHOD}, layers only"
    ops = {n.name: n.op_type for n in onnx.load(str(path)).graph.node}
    assert ops["/output_proj/MatMul"] == "MatMul" and "MatMulInteger" in ops.values()
    assert not any(t == "MatMul" and "layers" in n for n, t in ops.items())
