"""`make-tiny --family cosyvoice3`: the released layout (hyperpyyaml read permissively, `.pt` state dicts
loadable with weights_only=True, the two front-end ONNX models with their real inputs and outputs, the
Qwen2 directory), the strict reader, and the reference route (vLLM-Omni's flow and HiFT around
Qwen2ForCausalLM) running on it with every source of randomness fed as input."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from checkpoint_layouts import copy_of
from cosyvoice3_fixtures import *  # noqa: F403  (cosyvoice3_tiny)
from cosyvoice3_fixtures import noise_inputs, reference

from ttscore.contract.errors import CheckpointError

pytestmark = pytest.mark.unit


def test_layout_is_the_released_one(cosyvoice3_tiny: Path) -> None:
    import onnxruntime as ort
    import torch

    from ttscore.runtime.checkpoint_kit import read_hyperpyyaml

    names = {p.name for p in cosyvoice3_tiny.iterdir()}
    assert {"cosyvoice3.yaml", "llm.pt", "flow.pt", "hift.pt", "campplus.onnx", "speech_tokenizer_v3.onnx",
            "CosyVoice-BlankEN", "config.json"} <= names
    text = (cosyvoice3_tiny / "cosyvoice3.yaml").read_text()
    assert "!new:cosyvoice.flow.flow.CausalMaskedDiffWithDiT" in text and "!ref <chunk_size> * <token_mel_ratio>" in text
    cfg = read_hyperpyyaml(cosyvoice3_tiny / "cosyvoice3.yaml")
    est = cfg["flow"]["decoder"]["estimator"]
    assert est["static_chunk_size"] == 50 and est["num_decoding_left_chunks"] == -1
    assert cfg["flow"]["decoder"]["cfm_params"]["content"]["sigma_min"] == 1e-06
    assert cfg["hift"]["sampling_rate"] == 24000 and cfg["llm"]["llm_input_size"] == 64
    for name in ("llm.pt", "flow.pt", "hift.pt"):
        state = torch.load(cosyvoice3_tiny / name, weights_only=True)
        assert all(isinstance(v, torch.Tensor) for v in state.values())
    camp = ort.InferenceSession(str(cosyvoice3_tiny / "campplus.onnx"))
    (emb,) = camp.run(None, {camp.get_inputs()[0].name: np.random.default_rng(0).standard_normal((1, 37, 80)).astype(np.float32)})
    assert emb.shape == (1, 192)
    tok = ort.InferenceSession(str(cosyvoice3_tiny / "speech_tokenizer_v3.onnx"))
    ins = tok.get_inputs()
    assert [i.type for i in ins] == ["tensor(float)", "tensor(int32)"]
    ids = tok.run(None, {ins[0].name: np.random.default_rng(1).standard_normal((1, 128, 101)).astype(np.float32),
                         ins[1].name: np.array([101], np.int32)})[0]
    assert ids.shape == (1, 26) and ids.dtype == np.int32 and ids.min() >= 0 and ids.max() < 6561


def test_tokenizer_fits_the_text_embedding(cosyvoice3_tiny: Path) -> None:
    """vLLM-Omni's CosyVoice3Tokenizer (its special tokens added at load) stays inside the embedding."""
    from transformers import AutoTokenizer

    from ttscore.runtime.families.cosyvoice3.checkpoint import read_info

    info = read_info(cosyvoice3_tiny)
    tok = AutoTokenizer.from_pretrained(str(cosyvoice3_tiny / "CosyVoice-BlankEN"))
    tok.add_special_tokens({"additional_special_tokens": ["<|endofprompt|>", "[breath]", "<|im_start|>"]})
    ids = tok("You are a helpful assistant.<|endofprompt|>Hello world")["input_ids"]
    assert max(ids) < info.lm.vocab and tok.convert_tokens_to_ids("<|endofprompt|>") in ids


@pytest.mark.parametrize("file", ["llm.pt", "flow.pt", "hift.pt"])
def test_reader_refuses_missing_unexpected_and_misshapen(cosyvoice3_tiny: Path, tmp_path: Path, file: str) -> None:
    import torch

    from ttscore.runtime.families.cosyvoice3.checkpoint import read_checkpoint

    read_checkpoint(cosyvoice3_tiny)
    state = torch.load(cosyvoice3_tiny / file, weights_only=True)
    first = sorted(state)[0]
    for label, change in (("missing 1", lambda s: s.pop(first)),
                          ("unexpected 1 tensor.s.: extra.weight", lambda s: s.__setitem__("extra.weight", torch.zeros(2))),
                          ("wrong shape", lambda s: s.__setitem__(first, torch.zeros(3, 1, 7)))):
        ck = copy_of(cosyvoice3_tiny, tmp_path / f"{file}-{label[:4]}")
        bad = dict(state)
        change(bad)
        torch.save(bad, ck / file)
        with pytest.raises(CheckpointError, match=f"{file}: .*{label}"):
            read_checkpoint(ck)


def test_reader_takes_the_older_hift_names(cosyvoice3_tiny: Path, tmp_path: Path) -> None:
    """hift.pt saved with a `generator.` prefix and weight_g/weight_v (torch's older weight norm) reads the same."""
    import torch

    from ttscore.runtime.families.cosyvoice3.checkpoint import read_checkpoint

    ck = copy_of(cosyvoice3_tiny, tmp_path / "old")
    state = torch.load(ck / "hift.pt", weights_only=True)
    renamed = {"generator." + k.replace("parametrizations.weight.original0", "weight_g")
               .replace("parametrizations.weight.original1", "weight_v"): v for k, v in state.items()}
    torch.save(renamed, ck / "hift.pt")
    assert read_checkpoint(ck) == read_checkpoint(cosyvoice3_tiny)


def test_reader_refuses_a_pickle_with_code(cosyvoice3_tiny: Path, tmp_path: Path) -> None:
    import pickle

    from ttscore.runtime.families.cosyvoice3.checkpoint import read_checkpoint

    ck = copy_of(cosyvoice3_tiny, tmp_path / "code")
    (ck / "flow.pt").write_bytes(pickle.dumps({"x": shutil.copytree}))
    with pytest.raises(CheckpointError, match="flow.pt: cannot load with weights_only=True"):
        read_checkpoint(ck)


def test_reference_runs_on_make_tiny(cosyvoice3_tiny: Path) -> None:
    """The reference modules take make-tiny's tensors strictly (names and shapes are the reader's), and the
    whole route (LM tokens with RAS noise fed, flow with its noise fed, HiFT with its tables fed) runs:
    the same inputs give the same tokens and audio, other noise other tokens; 2 mel frames per token and
    480 samples per mel frame."""
    from ttscore.runtime.families.cosyvoice3.checkpoint import flow_shapes, hift_shapes, llm_shapes, read_info

    info = read_info(cosyvoice3_tiny)
    steps, rows = 24, info.lm.speech_rows
    rng = np.random.default_rng(7)
    inputs = noise_inputs(1, rows, steps, 2 * (steps + 6), requests=2)
    inputs["prompt_tokens_0"] = rng.integers(0, info.lm.speech_token_size, 6)
    inputs["prompt_feat_0"] = rng.standard_normal((12, 80)).astype(np.float32)
    inputs["embedding_0"] = rng.standard_normal(192).astype(np.float32)
    for k in ("prompt_tokens", "prompt_feat", "embedding", "ras_noise", "flow_noise"):
        inputs[f"{k}_1"] = inputs[f"{k}_0"].copy()
    req = {"text_ids": [11, 12, 13, 14], "max_new_tokens": steps, "min_new_tokens": 8}
    out = reference(cosyvoice3_tiny, [req, req], inputs)
    want = {f"{file} {k} {list(v)}" for file, shapes in (("llm.pt", llm_shapes(info)), ("flow.pt", flow_shapes(info)),
                                                          ("hift.pt", hift_shapes(info))) for k, v in shapes.items()}
    assert set(out["state"]) == want
    tokens = out["tokens_0"]
    assert 8 <= len(tokens) <= steps and tokens.max() < info.lm.speech_token_size
    np.testing.assert_array_equal(out["tokens_1"], tokens)
    np.testing.assert_array_equal(out["audio_1"], out["audio_0"])
    assert out["mel_0"].shape == (80, 2 * len(tokens))
    assert out["audio_0"].shape == (480 * 2 * len(tokens),)
    assert 0.005 < float(np.std(out["audio_0"])) < 0.5
    other = dict(inputs)
    other["ras_noise_0"] = noise_inputs(2, rows, steps, 2 * (steps + 6))["ras_noise_0"]
    out2 = reference(cosyvoice3_tiny, [{**req, "decode": False}], {k: v for k, v in other.items() if not k.endswith("_1")})
    assert not np.array_equal(out2["tokens_0"], tokens)


def test_real_size_layout_has_the_published_parameter_counts() -> None:
    """`--size real`'s tensors (not written here: ~4 GB) count as the published models: the DiT flow
    332.3 M, HiFT 20.8 M, the LM Qwen2-0.5B's 494 M + its tied lm_head + the two speech tables."""
    import math

    from export.cosyvoice3.tiny import info_of
    from ttscore.runtime.families.cosyvoice3.checkpoint import flow_shapes, hift_shapes, llm_shapes

    info = info_of("real")
    count = {f.__name__: sum(math.prod(s) for s in f(info).values()) for f in (llm_shapes, flow_shapes, hift_shapes)}
    assert round(count["flow_shapes"] / 1e6, 1) == 332.3
    assert round(count["hift_shapes"] / 1e6, 1) == 20.8
    qwen = count["llm_shapes"] - 151936 * 896 - 2 * 6761 * 896  # less lm_head (tied) and the speech tables
    assert round(qwen / 1e6) == 494
    assert (info.lm.heads, info.lm.kv_heads, info.lm.layers, info.flow.depth, info.flow.static_chunk_size) == (14, 2, 24, 22, 50)


def test_make_tiny_cli(tmp_path: Path) -> None:
    from triton_tts.cli import main

    assert main(["make-tiny", "--family", "cosyvoice3", "--out", str(tmp_path / "c")]) == 0
    assert (tmp_path / "c" / "cosyvoice3.yaml").is_file() and (tmp_path / "c" / "hift.pt").is_file()
    assert main(["make-tiny", "--family", "cosyvoice3", "--out", str(tmp_path / "d"), "--size", "1.7b"]) == 2
