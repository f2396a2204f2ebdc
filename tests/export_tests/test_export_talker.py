"""Talker / code-predictor ONNX export on tiny random models, validated against the reference modules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("transformers")

from export.qwen3_tts.talker import (  # noqa: E402
    _cos_sin,
    code_predictor_graph_spec,
    export_code_predictor,
    export_tables,
    export_talker,
    numpy_filter,
    numpy_sample,
    quantize_int8,
    sort_window,
    talker_graph_spec,
    validate_code_predictor,
    validate_int8,
    validate_talker,
)
from export.tracing import ort_session  # noqa: E402
from ttscore.contract.errors import ExportError  # noqa: E402

pytestmark = pytest.mark.export

ROPE = {"interleaved": True, "mrope_section": [4, 2, 2], "rope_type": "default", "type": "default"}


def tiny_model(cp_hidden: int = 64, seed: int = 0) -> Any:
    from export.qwen3_tts.reference import reference_imports

    with reference_imports():
        from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSForConditionalGeneration

    torch.manual_seed(seed)
    cfg = Qwen3TTSConfig(
        talker_config=dict(
            hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            intermediate_size=128, text_hidden_size=32, text_vocab_size=151936, vocab_size=3072,
            num_code_groups=16, rope_scaling=ROPE, rope_theta=1000000,
            spk_id={"vivian": 3000}, spk_is_dialect={"vivian": False}, codec_language_id={"english": 2050},
            codec_eos_token_id=2150, codec_pad_id=2148, codec_bos_id=2149, codec_think_id=2154,
            codec_nothink_id=2155, codec_think_bos_id=2156, codec_think_eos_id=2157,
            code_predictor_config=dict(
                hidden_size=cp_hidden, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                head_dim=16, intermediate_size=128, vocab_size=2048, num_code_groups=16,
            ),
        ),
        tts_model_type="custom_voice",
    )
    for c in (cfg, cfg.talker_config, cfg.talker_config.code_predictor_config):
        c._attn_implementation = "eager"
    return Qwen3TTSForConditionalGeneration(cfg).float().eval()


@pytest.fixture(scope="module")
def model() -> Any:
    return tiny_model(64)


@pytest.fixture(scope="module")
def out(model: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    d = tmp_path_factory.mktemp("talker_export")
    return {"dir": d, "talker": export_talker(model, d), "code_predictor": export_code_predictor(model, d)}


@pytest.fixture(scope="module")
def talker_sess(out: dict[str, Any]) -> Any:
    return ort_session(out["dir"] / "talker.onnx")


def _feed(x: np.ndarray, mask: np.ndarray, pos: np.ndarray, past: list[np.ndarray]) -> dict[str, np.ndarray]:
    feed = {"inputs_embeds": x, "attention_mask": mask, "position_ids": pos}
    for i in range(len(past) // 2):
        feed[f"past_key_{i}"], feed[f"past_value_{i}"] = past[2 * i], past[2 * i + 1]
    return feed


def _run(sess: Any, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feed), strict=True))


def test_talker_export_report_and_io(model: Any, out: dict[str, Any]) -> None:
    rep = out["talker"]
    assert rep["file"] == "talker.onnx" and rep["cases"] >= 9
    assert all(v <= 1e-4 for v in rep["max_abs_err"].values()), rep["max_abs_err"]
    spec = talker_graph_spec(model)
    g = onnx.load(str(out["dir"] / "talker.onnx")).graph
    assert [i.name for i in g.input] == spec.input_names
    assert [o.name for o in g.output] == spec.output_names
    dims = [d.dim_param or d.dim_value for d in g.input[3].type.tensor_type.shape.dim]
    assert dims == ["batch", 2, "past", 16]


def test_mrope_equals_plain_rope(model: Any) -> None:
    """The reference interleaved MRoPE with three equal position rows is exactly plain RoPE."""
    from qwen_tts.core.models.modeling_qwen3_tts import apply_multimodal_rotary_pos_emb

    rot = model.talker.model.rotary_emb
    pos = torch.tensor([[0, 1, 2, 7, 300], [5, 6, 7, 8, 4000]])
    q, k = torch.randn(2, 4, 5, 16), torch.randn(2, 2, 5, 16)
    cos3, sin3 = rot(q, pos[None].expand(3, -1, -1))
    want_q, want_k = apply_multimodal_rotary_pos_emb(q, k, cos3, sin3, ROPE["mrope_section"], True)
    cos, sin = _cos_sin(rot.inv_freq, rot.attention_scaling, pos)
    half = lambda x: torch.cat((-x[..., 8:], x[..., :8]), -1)  # noqa: E731
    assert torch.equal(q * cos + half(q) * sin, want_q)
    assert torch.equal(k * cos + half(k) * sin, want_k)


def test_prefill_then_decode_chain(model: Any, talker_sess: Any) -> None:
    """P = 0 prefill, then T = 1 decode fed with the prefill's new K/V, equals one longer prefill."""
    rng = np.random.default_rng(1)
    n, layers = 6, model.talker.config.num_hidden_layers
    x = rng.standard_normal((1, n + 1, 64)).astype(np.float32)
    empty = [np.zeros((1, 2, 0, 16), np.float32)] * (2 * layers)
    pre = _run(talker_sess, _feed(x[:, :n], np.ones((1, n), np.int64), np.arange(n)[None], empty))
    past = [pre[f"new_{kind}_{i}"] for i in range(layers) for kind in ("key", "value")]
    step = _run(talker_sess, _feed(x[:, n:], np.ones((1, n + 1), np.int64), np.array([[n]]), past))
    full = _run(talker_sess, _feed(x, np.ones((1, n + 1), np.int64), np.arange(n + 1)[None], empty))
    np.testing.assert_allclose(step["logits"], full["logits"], atol=1e-5)
    np.testing.assert_allclose(step["hidden"], full["hidden"], atol=1e-5)
    np.testing.assert_allclose(step["new_key_1"], full["new_key_1"][:, :, n:], atol=1e-5)
    # ...and that matches the reference talker + codec_head
    from transformers.cache_utils import DynamicCache

    with torch.no_grad():
        ref = model.talker.model(inputs_embeds=torch.from_numpy(x), past_key_values=DynamicCache(), use_cache=True)
        ref_logits = model.talker.codec_head(ref.last_hidden_state[:, -1]).numpy()
    assert np.abs(step["logits"] - ref_logits).max() <= 1e-4


def test_ragged_batch_equals_per_row(talker_sess: Any) -> None:
    """A ragged batch (padding slots anywhere in the past) gives each row its unpadded B = 1 result."""
    rng = np.random.default_rng(2)
    lengths, slots_total, t = [9, 4, 6], 9, 2
    rows = []
    for n in lengths:
        x = rng.standard_normal((1, n + t, 64)).astype(np.float32)
        empty = [np.zeros((1, 2, 0, 16), np.float32)] * 4
        pre = _run(talker_sess, _feed(x[:, :n], np.ones((1, n), np.int64), np.arange(n)[None], empty))
        past = [pre[f"new_{kind}_{i}"] for i in range(2) for kind in ("key", "value")]
        alone = _run(talker_sess, _feed(x[:, n:], np.ones((1, n + t), np.int64), np.arange(n, n + t)[None], past))
        rows.append((x, past, alone))
    mask = np.zeros((3, slots_total + t), np.int64)
    mask[:, slots_total:] = 1
    past_b = [rng.standard_normal((3, 2, slots_total, 16)).astype(np.float32) * 100 for _ in range(4)]  # garbage
    layouts = [np.arange(9), np.array([0, 3, 4, 8]), np.array([2, 3, 4, 5, 6, 7])]  # holes, left padding
    for r, (slots, (_, past, _)) in enumerate(zip(layouts, rows, strict=True)):
        mask[r, slots] = 1
        for j in range(4):
            past_b[j][r][:, slots] = past[j][0]
    x_b = np.concatenate([x[:, -t:] for x, _, _ in rows])
    pos_b = np.stack([np.arange(n, n + t) for n in lengths])
    got = _run(talker_sess, _feed(x_b, mask, pos_b, past_b))
    for r, (_, _, alone) in enumerate(rows):
        for name in ("logits", "hidden", "new_key_0", "new_value_1"):
            np.testing.assert_allclose(got[name][r], alone[name][0], atol=2e-5, err_msg=f"row {r} {name}")


def test_code_predictor_greedy_matches_reference(model: Any, out: dict[str, Any]) -> None:
    rep = out["code_predictor"]
    assert rep["codes_checked"] > 0 and rep["max_abs_err"]["codec_embed_sum"] <= 1e-4
    spec = code_predictor_graph_spec(model)
    sess = ort_session(out["dir"] / "code_predictor.onnx")
    assert [i.name for i in sess.get_inputs()] == spec.input_names
    rng = np.random.default_rng(3)
    b = 3
    hidden = rng.standard_normal((b, 64)).astype(np.float32)
    code0 = np.array([5, 2047, 100])
    got = _run(sess, {
        "hidden": hidden, "code0": code0, "noise": rng.random((b, 15), dtype=np.float32),
        "do_sample": np.zeros(b, bool), "temperature": np.full(b, 0.9, np.float32),
        "top_k": np.full(b, 50), "top_p": np.ones(b, np.float32),
    })
    cp = model.talker.code_predictor
    with torch.no_grad():
        e0 = model.talker.model.codec_embedding(torch.from_numpy(code0)[:, None])
        ref = cp.generate(inputs_embeds=torch.cat((torch.from_numpy(hidden)[:, None], e0), 1), max_new_tokens=15,
                          do_sample=False, return_dict_in_generate=True, output_hidden_states=True).sequences
    np.testing.assert_array_equal(got["codes"], ref.numpy())


def test_projected_code_predictor(tmp_path: Path) -> None:
    """Code predictor narrower than the talker: small_to_mtp_projection is a real Linear."""
    m = tiny_model(32, seed=1)
    assert isinstance(m.talker.code_predictor.small_to_mtp_projection, torch.nn.Linear)
    rep = export_code_predictor(m, tmp_path)
    assert rep["codes_checked"] > 0 and rep["boundary_ties"] <= 1
    assert all(v <= 1e-4 for v in rep["max_abs_err"].values()), rep["max_abs_err"]


def test_numpy_filter_matches_hf_warpers() -> None:
    from transformers.generation.logits_process import (
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    rng = np.random.default_rng(4)
    for temp, k, p in [(0.9, 50, 1.0), (0.7, 0, 0.8), (1.3, 5, 0.5), (1.0, 2048, 0.95), (0.5, 20, 0.3)]:
        logits = (rng.standard_normal((1, 2048)) * 4).astype(np.float32)
        scores = torch.from_numpy(logits.copy())
        scores = TemperatureLogitsWarper(temp)(None, scores)
        if k:
            scores = TopKLogitsWarper(k)(None, scores)
        if p < 1:
            scores = TopPLogitsWarper(p)(None, scores)
        hf_kept = set(np.flatnonzero(np.isfinite(scores.numpy()[0])).tolist())
        order, _, n = numpy_filter(logits[0], temp, k, p)
        assert set(order[:n].tolist()) == hf_kept, (temp, k, p)


def test_sampling_path_matches_numpy(out: dict[str, Any]) -> None:
    """The exported sampler equals numpy_sample: on the model's logits inside validate_code_predictor
    (fixed noise, teacher-forced reference logits), and here on peaked logits where top-k / top-p
    boundaries cut deep."""
    rep = out["code_predictor"]
    assert rep["cases"] >= 4 and rep["boundary_ties"] <= 1
    rng = np.random.default_rng(5)
    logits = (rng.standard_normal((6, 2048)) * 5).astype(np.float32)
    knobs = {"do_sample": np.array([1, 1, 1, 0, 1, 1], bool), "temperature": np.array([0.9, 0.7, 1.3, 1, 0, 1], np.float32),
             "top_k": np.array([50, 0, 5, 0, 50, 1]), "top_p": np.array([1, 0.8, 0.5, 1, 1, 1], np.float32)}
    u = rng.random(6, dtype=np.float32)
    from export.qwen3_tts.talker import _torch_sample

    want = numpy_sample(logits, u, **knobs)
    got = _torch_sample(torch.from_numpy(logits), torch.from_numpy(u), *(torch.from_numpy(v) for v in knobs.values()))
    np.testing.assert_array_equal(got.numpy(), want)
    assert want[3] == logits[3].argmax() and want[4] == logits[4].argmax() and want[5] == logits[5].argmax()

    # All rows with top-k on: the graph sorts only max(k) + slack tokens; same draws as a full sort.
    knobs = {"do_sample": np.ones(6, bool), "temperature": np.full(6, 0.9, np.float32),
             "top_k": np.array([50, 50, 3, 10, 50, 1]), "top_p": np.array([1, 0.9, 1, 0.5, 0.2, 1], np.float32)}
    assert sort_window(*(torch.from_numpy(knobs[k]) for k in ("do_sample", "temperature", "top_k")), 2048).item() == 58
    got = _torch_sample(torch.from_numpy(logits), torch.from_numpy(u), *(torch.from_numpy(v) for v in knobs.values()))
    for r in range(6):
        order, sv, n = numpy_filter(logits[r], 0.9, int(knobs["top_k"][r]), float(knobs["top_p"][r]))  # full sort
        e = np.exp(sv[:n] - sv[0])
        cdf = np.cumsum(e / e.sum(dtype=np.float32), dtype=np.float32)
        assert got[r].item() == order[min(int((cdf <= u[r]).sum()), n - 1)]


def test_int8_variants(model: Any, out: dict[str, Any]) -> None:
    for name in ("talker", "code_predictor"):
        q = quantize_int8(out["dir"] / f"{name}.onnx")
        assert q.name == f"{name}.int8.onnx"
        rep = validate_int8(model, out["dir"] / f"{name}.onnx", q)
        print(name, "int8", rep)  # agreement is reported, not asserted to be perfect (int8 is lossy)
        assert rep["greedy_agreement"] >= 0.6
        ops = {n.op_type for n in onnx.load(str(q)).graph.node}
        assert "MatMulInteger" in ops


def test_tables(model: Any, tmp_path: Path) -> None:
    rep = export_tables(model, tmp_path)
    text = np.load(tmp_path / "text_embeddings.npy", mmap_mode="r")
    assert text.shape == (151936, 64) and text.dtype == np.float32
    with torch.no_grad():
        ids = torch.tensor([0, 151671, 151935])
        want = model.talker.text_projection(model.talker.model.text_embedding(ids)).numpy()
    np.testing.assert_allclose(text[[0, 151671, 151935]], want, atol=1e-6)
    codec = np.load(tmp_path / "codec_embeddings.npy")
    groups = np.load(tmp_path / "group_embeddings.npy")
    assert codec.shape == (3072, 64) and groups.shape == (15, 2048, 64)
    np.testing.assert_array_equal(groups[3], model.talker.code_predictor.model.codec_embedding[3].weight.detach().numpy())
    assert rep["group_embeddings"]["shape"] == [15, 2048, 64]


def test_broken_talker_graph_raises(model: Any, out: dict[str, Any], tmp_path: Path) -> None:
    g = onnx.load(str(out["dir"] / "talker.onnx"))
    init = max(g.graph.initializer, key=lambda t: np.prod(t.dims))  # a weight matrix
    arr = onnx.numpy_helper.to_array(init).copy()
    arr.flat[: arr.size // 10] *= 1.5
    init.CopyFrom(onnx.numpy_helper.from_array(arr, init.name))
    onnx.save(g, str(tmp_path / "talker.onnx"))
    with pytest.raises(ExportError, match="talker"):
        validate_talker(model, tmp_path / "talker.onnx")


def test_mask_ignoring_runtime_is_caught(model: Any, talker_sess: Any) -> None:
    """A graph that ignores attention_mask must fail the ragged cases of the validation."""

    class IgnoreMask:
        def get_outputs(self) -> Any:
            return talker_sess.get_outputs()

        def run(self, names: Any, feed: dict[str, np.ndarray]) -> Any:
            return talker_sess.run(names, {**feed, "attention_mask": np.ones_like(feed["attention_mask"])})

    with pytest.raises(ExportError, match="ragged|leftpad"):
        validate_talker(model, Path("unused.onnx"), session=IgnoreMask())


def test_broken_code_predictor_weight_raises(model: Any, out: dict[str, Any]) -> None:
    weight = model.talker.code_predictor.lm_head[2].weight
    saved = weight.detach().clone()
    try:
        with torch.no_grad():
            weight.mul_(-1.0)
        with pytest.raises(ExportError, match="code_predictor"):
            validate_code_predictor(model, out["dir"] / "code_predictor.onnx", check_wrapper=False)
    finally:
        with torch.no_grad():
            weight.copy_(saved)


def test_non_float32_model_is_refused(tmp_path: Path) -> None:
    m = tiny_model(64).to(torch.bfloat16)
    with pytest.raises(ExportError, match="float32"):
        export_talker(m, tmp_path)


def test_external_data_path(model: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Graphs over the protobuf limit (the 1.7B talker) go to one `<file>.data`; forced here."""
    import export.tracing

    monkeypatch.setattr(export.tracing, "EXTERNAL_DATA_THRESHOLD", 1000)
    rep = export_talker(model, tmp_path)
    assert (tmp_path / "talker.onnx.data").exists() and rep["bytes"] > (tmp_path / "talker.onnx").stat().st_size
    assert sorted(p.name for p in tmp_path.iterdir()) == ["talker.onnx", "talker.onnx.data"]
    q = quantize_int8(tmp_path / "talker.onnx")
    assert (tmp_path / "talker.int8.onnx.data").exists()  # still over the (patched) threshold
    assert validate_int8(model, tmp_path / "talker.onnx", q)["greedy_agreement"] >= 0.6


def test_int8_of_large_graph_comes_back_inline(model: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """fp32 over the limit but int8 under it (the 1.7B talker): the int8 file is self-contained."""
    import export.tracing

    monkeypatch.setattr(export.tracing, "EXTERNAL_DATA_THRESHOLD", 600_000)  # tiny talker: 1.1 MB fp32, 0.3 MB int8
    export_talker(model, tmp_path, validate=False)
    assert (tmp_path / "talker.onnx.data").exists()
    q = quantize_int8(tmp_path / "talker.onnx")
    assert not (tmp_path / "talker.int8.onnx.data").exists()
    moved = tmp_path / "moved.onnx"
    q.rename(moved)  # what the exporter does with --precision int8
    assert validate_int8(model, tmp_path / "talker.onnx", moved)["greedy_agreement"] >= 0.6


def test_int4_variants_through_the_exporter(model: Any, out: dict[str, Any], tmp_path: Path) -> None:
    """export --precision int4: MatMulNBits weights, the graph replaced in place, its error vs
    fp32 reported (agreement is a measurement on random weights, not a quality claim)."""
    import shutil

    from export.qwen3_tts.exporter import _quantize

    for name in ("talker", "code_predictor"):
        path = tmp_path / f"{name}.onnx"
        for suffix in ("", ".data"):  # the graph and its external weights, if any
            if (out["dir"] / f"{name}.onnx{suffix}").exists():
                shutil.copy2(out["dir"] / f"{name}.onnx{suffix}", tmp_path / f"{name}.onnx{suffix}")
        rep = _quantize(model, path, name, "int4")
        assert rep["quantized"].startswith("int4")
        vs = rep["vs_fp32"]
        print(name, "int4", vs)
        assert 0.0 <= vs["greedy_agreement"] <= 1.0 and all(np.isfinite(v) for v in vs["max_abs_err"].values())
        ops = {n.op_type for n in onnx.load(str(path)).graph.node}
        assert "MatMulNBits" in ops and not list(tmp_path.glob(f"{name}.int4*"))
        ort_session(path)  # the replaced graph loads where it is (its external weights renamed with it)


def test_int8_through_the_exporter(model: Any, out: dict[str, Any], tmp_path: Path) -> None:
    """export --precision int8 (Qwen3-TTS): the code predictor as 8-bit MatMulNBits in blocks of
    INT8_BLOCK along K, the talker as dynamic MatMulInteger (faster on prefill bursts); each graph
    replaced in place, its error vs fp32 in the report (a measurement on random weights, printed;
    not a quality claim: issue 29, perf/README.md)."""
    import shutil

    from export.quantize import INT8_BLOCK, INT8_METHOD, int8_block_method
    from export.qwen3_tts.exporter import _quantize

    for name, method, op in (("talker", INT8_METHOD, "MatMulInteger"),
                             ("code_predictor", int8_block_method(INT8_BLOCK), "MatMulNBits")):
        path = tmp_path / f"{name}.onnx"
        for suffix in ("", ".data"):
            if (out["dir"] / f"{name}.onnx{suffix}").exists():
                shutil.copy2(out["dir"] / f"{name}.onnx{suffix}", tmp_path / f"{name}.onnx{suffix}")
        rep = _quantize(model, path, name, "int8")
        assert rep["quantized"] == method
        vs = rep["vs_fp32"]
        print(name, method, vs)
        assert 0.0 <= vs["greedy_agreement"] <= 1.0 and all(np.isfinite(v) for v in vs["max_abs_err"].values())
        graph = onnx.load(str(path))
        ops = [n for n in graph.graph.node if n.op_type in ("MatMulNBits", "MatMulInteger")]
        assert ops and {n.op_type for n in ops} == {op} and not list(tmp_path.glob(f"{name}.int8*"))
        for n in ops:
            attrs = {a.name: a.i for a in n.attribute}
            if op == "MatMulNBits":
                assert attrs["bits"] == 8 and attrs["block_size"] == INT8_BLOCK and attrs["accuracy_level"] == 4
        ort_session(path)
