"""Fish Speech S2 Pro's make-tiny checkpoint (fishaudio/s2-pro's layout), its strict reader, and the reference
route (vLLM-Omni 0.30.0's fish_speech modules, tests/fish_speech_reference.py) running on it with its sampling
noise fed as inputs, text-only and cloned."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from checkpoint_layouts import copy_of, edit_safetensors
from fish_speech_fixtures import *  # noqa: F403  (fish_tiny)
from fish_speech_fixtures import reference

from export.families import family_of
from ttscore.contract import fish_speech as spec
from ttscore.contract.errors import CheckpointError
from ttscore.runtime.families.fish_speech.checkpoint import (
    CODEC,
    CONFIG,
    TOKENIZER,
    WEIGHTS,
    codec_shapes,
    parse_config,
    read_checkpoint,
    tensor_shapes,
)

pytestmark = pytest.mark.export


def test_layout_and_facts(fish_tiny: Path) -> None:
    names = sorted(p.name for p in fish_tiny.iterdir())
    assert names == [CODEC, CONFIG, WEIGHTS, TOKENIZER, "tokenizer_config.json"]
    raw = json.loads((fish_tiny / CONFIG).read_text())
    assert raw["model_type"] == "fish_qwen3_omni"
    for sub in ("text_config", "audio_decoder_config"):  # Fish field names, not Qwen ones
        assert {"dim", "n_head", "n_local_heads", "head_dim", "n_layer", "intermediate_size"} <= set(raw[sub])
        assert not {"hidden_size", "num_hidden_layers"} & set(raw[sub])
    assert family_of(fish_tiny).name == spec.FAMILY
    info = read_checkpoint(fish_tiny)
    assert (info.config.semantic_start, info.config.semantic_end, info.config.audio_pad) == (151678, 155773, 151677)
    assert info.config.slow.vocab_size == 155776 and info.config.num_codebooks == 10
    assert info.codec.samples_per_frame == 2048 and info.codec.n_residual == 9
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(fish_tiny))
    assert tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|audio_pad|>",
                                      "<|semantic:0|>", "<|semantic:4095|>"]) == [151643, 151644, 151645, 151677,
                                                                                  151678, 155773]
    text = "Hello, world 123"
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text


def _rewrite_codec(root: Path, edit) -> None:  # type: ignore[no-untyped-def]
    import torch

    state = torch.load(root / CODEC, weights_only=True)
    edit(state)
    torch.save({"generator": state}, root / CODEC)  # upstream's nesting, also accepted


def test_reader_refuses_missing_unexpected_and_misshapen(fish_tiny: Path, tmp_path: Path) -> None:
    import torch

    a = copy_of(fish_tiny, tmp_path / "a")
    edit_safetensors(a / WEIGHTS, lambda s: s.pop("text_model.model.layers.1.attention.q_norm.weight"))
    with pytest.raises(CheckpointError, match=r"missing 1 tensor\(s\): text_model.model.layers.1.attention.q_norm"):
        read_checkpoint(a)
    b = copy_of(fish_tiny, tmp_path / "b")
    edit_safetensors(b / WEIGHTS, lambda s: s.update({"text_model.model.output.weight": torch.zeros(2, 2)}))
    with pytest.raises(CheckpointError, match=r"unexpected 1 tensor\(s\): text_model.model.output.weight"):
        read_checkpoint(b)
    c = copy_of(fish_tiny, tmp_path / "c")
    edit_safetensors(c / WEIGHTS, lambda s: s.update({"audio_decoder.norm.weight": torch.zeros(7)}))
    with pytest.raises(CheckpointError, match=r"audio_decoder.norm.weight \[7\] \(want \[32\]\)"):
        read_checkpoint(c)
    d = copy_of(fish_tiny, tmp_path / "d")
    _rewrite_codec(d, lambda s: s.pop("quantizer.post_module.layers.0.ffn_layer_scale.gamma"))
    with pytest.raises(CheckpointError, match=r"codec.pth .*missing 1 tensor\(s\): quantizer.post_module.layers.0"):
        read_checkpoint(d)
    e = copy_of(fish_tiny, tmp_path / "e")
    _rewrite_codec(e, lambda s: s.update({"decoder.extra.weight": torch.zeros(1)}))
    with pytest.raises(CheckpointError, match=r"unexpected 1 tensor\(s\): decoder.extra.weight"):
        read_checkpoint(e)
    f = copy_of(fish_tiny, tmp_path / "f")  # the DAC transformers' buffers (vLLM-Omni persists them) are fine
    _rewrite_codec(f, lambda s: s.update({"quantizer.post_module.freqs_cis": torch.zeros(4, 32, 2)}))
    assert read_checkpoint(f).codec.latent_dim == 64
    g = copy_of(fish_tiny, tmp_path / "g")
    tok = json.loads((g / TOKENIZER).read_text())
    for t in tok["added_tokens"]:
        if t["content"] == "<|im_end|>":
            t["id"] = 151646
    (g / TOKENIZER).write_text(json.dumps(tok))
    with pytest.raises(CheckpointError, match=r"<\|im_end\|> is id 151646, expected 151645"):
        read_checkpoint(g)
    h = copy_of(fish_tiny, tmp_path / "h")
    cfg = json.loads((h / CONFIG).read_text())
    cfg["text_config"]["tie_word_embeddings"] = False
    (h / CONFIG).write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="tie_word_embeddings false is not supported"):
        read_checkpoint(h)


def test_make_tiny_cli(tmp_path: Path) -> None:
    from triton_tts.cli import main

    assert main(["make-tiny", "--family", "fish_speech", "--out", str(tmp_path / "t")]) == 0
    assert read_checkpoint(tmp_path / "t").codec.decoder_dim == 32
    assert main(["make-tiny", "--family", "fish_speech", "--out", str(tmp_path / "u"), "--size", "1.7b"]) == 2


def test_real_size() -> None:
    """--size real (not written here: 9 GB) has s2-pro's shapes: a ~4.4 B dual AR and the 391 M DAC."""
    from export.fish_speech.tiny import codec_dims, config

    cfg = parse_config(config("real"))
    total = sum(math.prod(s) for s in tensor_shapes(cfg).values())
    assert 4.3e9 < total < 4.6e9
    dac = sum(math.prod(s) for s in codec_shapes(codec_dims("real")).values())
    assert 3.85e8 < dac < 3.95e8


def _requests() -> list[dict]:
    return [{"text": "Hello world", "max_new_tokens": 6, "seed": 1},
            {"text": "Good morning.", "max_new_tokens": 5, "seed": 2, "ref_text": "The quick brown fox.",
             "temperature": 0.7, "top_k": 20, "top_p": 0.8}]


def test_reference_runs_on_tiny_with_noise_fed(fish_tiny: Path) -> None:
    """The reference on the tiny checkpoint, text-only and cloned (a 0.5 s 44.1 kHz clip encoded by the DAC):
    the noise it drew, fed back, gives the same codes and audio; other noise gives other codes. Its codec
    loaded every tensor make-tiny wrote, and make-tiny's codec table is, at the real widths, vLLM-Omni's own
    build_dac_codec()."""
    from export.fish_speech.tiny import codec_dims

    clip = (0.3 * np.sin(np.arange(22050) * 0.05)).astype(np.float32)
    reqs = _requests()
    first = reference(fish_tiny, reqs, {"ref_audio_1": clip})
    fed = {"ref_audio_1": clip}
    for i in range(2):
        fed[f"q_slow_{i}"], fed[f"q_fast_{i}"] = first[f"q_slow_{i}"], first[f"q_fast_{i}"]
    again = reference(fish_tiny, reqs, fed)
    other = dict(fed, q_slow_0=first["q_slow_0"][:, ::-1].copy())
    changed = reference(fish_tiny, reqs, other)
    for i in range(2):
        codes = first[f"codes_{i}"]
        assert codes.shape[1] == 10 and (0 < len(codes) <= reqs[i]["max_new_tokens"])
        assert len(codes) == reqs[i]["max_new_tokens"] or bool(first[f"stopped_{i}"])
        assert (codes[:, 0] < 4096).all() and (codes[:, 1:] < 1024).all()
        assert first[f"audio_{i}"].shape == (2048 * len(codes),) and np.isfinite(first[f"audio_{i}"]).all()
        np.testing.assert_array_equal(again[f"codes_{i}"], codes)
        np.testing.assert_array_equal(again[f"audio_{i}"], first[f"audio_{i}"])
        ids = first[f"prompt_ids_{i}"]
        assert ids[0] == 151644 and ids[-1] == 151672  # <|im_start|> ... <|voice|>
    assert not np.array_equal(changed["codes_0"], first["codes_0"])
    ref_codes = first["ref_codes_1"]
    assert ref_codes.shape == (math.ceil(len(clip) / 2048), 10)
    ids = first["prompt_ids_1"]
    start = int(np.flatnonzero(ids == 151674)[0]) + 1  # <|audio_start|>
    np.testing.assert_array_equal(ids[start:start + len(ref_codes)], ref_codes[:, 0] + 151678)
    real = {str(line).split(" ", 1)[0]: tuple(json.loads(str(line).split(" ", 1)[1]))
            for line in first["real_codec_state"]}
    real = {k: v for k, v in real.items() if not k.endswith(("freqs_cis", "causal_mask"))}
    assert real == codec_shapes(codec_dims("real"))


def test_reference_backbone_is_stock_qwen3(fish_tiny: Path) -> None:
    """The reference's Slow AR backbone (vLLM-Omni's Qwen3-structured layers standing in for vLLM's Qwen3Model)
    equals transformers' Qwen3Model on the same weights (q/k permuted from the interleaved rotary layout, cos/sin
    rounded to bf16) over 40 positions (tests/fish_speech_hf_check.py)."""
    from vllm_omni_source import run_with_wheel

    x = np.random.default_rng(0).standard_normal((40, 32)).astype(np.float32)
    out = run_with_wheel("fish_speech", Path(__file__).resolve().parents[1] / "fish_speech_hf_check.py",
                         str(fish_tiny), inputs={"embeds": x})
    assert np.abs(out["ours"]).max() > 0.1
    np.testing.assert_allclose(out["ours"], out["hf"], atol=1e-5, rtol=0)
