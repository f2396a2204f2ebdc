"""MOSS-TTS-Nano's LM graphs (global_step, local_step: export/moss_tts_nano/exporter.py) against mlx-audio 0.6.2 (the
reference, "mlx" through refenv: tests/moss_tts_nano_lm_mlx.py), on the make-tiny checkpoint and on one mlx-audio
made from its own config classes (other widths, heads, layers, local layers, codebook size and RoPE base; not
make-tiny's): frames decoded through the two ONNX graphs with the runtime's samplers
(ttscore/runtime/families/moss_tts_nano/sampling.py) equal the reference's, greedy at repetition penalty 1.0 and
1.2, and sampled with the same uniforms fed to both (mlx's categorical replaced by the same inverse CDF); the
prompt rows of a voice-clone request equal the reference's; the make-tiny checkpoint loads strictly in mlx-audio
(every run here does) and its greedy decoding ends by itself; the checkpoint reader takes pytorch_model.bin and
refuses wrong tensors by name.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.export

TESTS = Path(__file__).resolve().parents[1]
MLX = TESTS / "moss_tts_nano_lm_mlx.py"
MAX_FRAMES = 10
FOREIGN = {"seed": 5, "vocab_size": 520, "n_embd": 48, "n_layer": 3, "n_head": 6, "n_inner": 96, "local_layers": 2,
           "codebook_size": 20, "rope_base": 5000.0}
SAMPLED = {"do_sample": True, "text_temperature": 1.0, "text_top_k": 50, "text_top_p": 1.0, "audio_temperature": 0.8,
           "audio_top_k": 8, "audio_top_p": 0.95, "audio_repetition_penalty": 1.2}


def _require_mlx() -> None:
    import refenv

    try:
        refenv.python("mlx")
    except refenv.RefEnvError as exc:
        refenv.missing(str(exc))


def _mlx(mode: str, ckpt: Path, inputs: dict[str, np.ndarray], args: dict[str, Any] | None = None
         ) -> dict[str, np.ndarray]:
    import refenv

    return refenv.run("mlx", MLX, inputs, [mode, str(ckpt), json.dumps(args or {})])


def _probe_rows(vocab: int, codebook: int, seed: int = 3) -> np.ndarray:
    """A voice-clone-shaped prompt of plain ids: text rows, 4 reference code rows (user slot), text rows ending in
    audio_start."""
    from ttscore.contract.moss_tts_nano import graphs as spec

    rng = np.random.default_rng(seed)
    text = [spec.IM_START_ID, *rng.integers(10, vocab, 6), spec.AUDIO_START_ID]
    tail = [spec.AUDIO_END_ID, *rng.integers(10, vocab, 14), spec.IM_END_ID, spec.IM_START_ID, spec.AUDIO_START_ID]
    rows = [[i] + [codebook] * 16 for i in text]
    rows += [[spec.AUDIO_USER_SLOT_ID, *rng.integers(0, codebook, 16)] for _ in range(4)]
    rows += [[i] + [codebook] * 16 for i in tail]
    return np.array(rows, np.int64)


def _make_foreign(out: Path) -> None:
    from export.moss_tts_nano.tiny import tokenizer_model

    out.mkdir(parents=True, exist_ok=True)
    _mlx("foreign", out, {"rows": _probe_rows(300, FOREIGN["codebook_size"])}, FOREIGN)
    (out / "tokenizer.model").write_bytes(tokenizer_model(vocab=FOREIGN["vocab_size"]))


@pytest.fixture(scope="module", params=["tiny", "foreign"])
def lm(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A checkpoint (the store's), a fresh export of its two LM graphs, their sessions and the tables."""
    from artifacts import STORE

    from export.moss_tts_nano.exporter import export_lm
    from export.tracing import ort_session
    from ttscore.runtime.families.moss_tts_nano.checkpoint import check_tensors, read_config

    _require_mlx()
    if request.param == "tiny":
        from export.moss_tts_nano.tiny import make_tiny_moss

        ckpt = STORE.checkpoint("moss-tts-nano-tiny", lambda out: make_tiny_moss(out, seed=0))
    else:
        ckpt = STORE.checkpoint("moss-tts-nano-foreign", _make_foreign, sources=[MLX], **FOREIGN)
    c = read_config(ckpt)
    check_tensors(ckpt, c)
    out = tmp_path_factory.mktemp(f"moss-lm-{request.param}")
    specs, reports, tabs = export_lm(ckpt, out, c)
    return {"name": request.param, "ckpt": ckpt, "c": c, "tabs": tabs, "reports": reports,
            "global": ort_session(out / specs["global_step"].filename),
            "local": ort_session(out / specs["local_step"].filename),
            "rows": _probe_rows(min(c.vocab_size, 300), c.codebook_size)}


def _decode(lm: dict[str, Any], rows: np.ndarray, **kw: Any) -> tuple[np.ndarray, int]:
    from export.moss_tts_nano.exporter import decode_frames

    return decode_frames(lm["global"], lm["local"], lm["c"], lm["tabs"], rows, MAX_FRAMES, **kw)


def test_hidden_and_stop_logits(lm: dict[str, Any]) -> None:
    """The prompt's last hidden state and the first stop/continue logits, graph vs reference (float32 both)."""
    from export.moss_tts_nano.lm import embed_rows
    from export.tracing import empty_past, ort_run, with_past
    from ttscore.contract.moss_tts_nano import graphs as spec

    c, rows = lm["c"], lm["rows"]
    ref = _mlx("hidden", lm["ckpt"], {"rows": rows})
    x = embed_rows(rows[None], lm["tabs"][spec.WTE], lm["tabs"][spec.AUDIO_EMBEDDINGS], c.audio_pad_id)
    n = rows.shape[0]
    h = ort_run(lm["global"], with_past({"inputs_embeds": x, "attention_mask": np.ones((1, n), np.int64),
                                         "position_ids": np.arange(n, dtype=np.int64)[None]},
                                        empty_past(c.layers, c.heads, c.head_dim)))[0]
    text = ort_run(lm["local"], with_past({"inputs_embeds": h[:, None], "audio_head": lm["tabs"][spec.AUDIO_EMBEDDINGS][0]},
                                          empty_past(c.local_layers, c.heads, c.head_dim)))[0]
    np.testing.assert_allclose(h[0], ref["hidden"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(text[0], ref["text_logits"], atol=1e-5, rtol=0)


@pytest.mark.parametrize("penalty", [1.0, 1.2])
def test_greedy_frames_equal_reference(lm: dict[str, Any], penalty: float) -> None:
    rows = lm["rows"]
    ref = _mlx("generate", lm["ckpt"], {"rows": rows}, {"do_sample": False, "max_frames": MAX_FRAMES,
                                                        "audio_repetition_penalty": penalty})
    got, _ = _decode(lm, rows, penalty=penalty)
    assert len(ref["frames"]) >= 2, "the reference stopped before a second frame: nothing compared"
    np.testing.assert_array_equal(got, ref["frames"])
    if lm["name"] == "tiny":  # the stop row: greedy decoding ends by itself
        assert len(got) < MAX_FRAMES


def test_sampled_frames_equal_reference_with_fed_uniforms(lm: dict[str, Any]) -> None:
    rows = lm["rows"]
    uniforms = np.random.default_rng(21).random(17 * MAX_FRAMES)
    uniforms[::17] *= 0.5  # each frame's first draw is its stop decision: below 0.5 it continues where greedy does
    ref = _mlx("generate", lm["ckpt"], {"rows": rows, "uniforms": uniforms}, {**SAMPLED, "max_frames": MAX_FRAMES})
    knobs = {k: v for k, v in SAMPLED.items() if k not in ("do_sample", "audio_repetition_penalty")}
    got, used = _decode(lm, rows, do_sample=True, penalty=SAMPLED["audio_repetition_penalty"], knobs=knobs,
                        uniforms=uniforms)
    assert len(ref["frames"]) >= 2
    np.testing.assert_array_equal(got, ref["frames"])
    assert used == int(ref["used"])


def test_voice_clone_prompt_rows_equal_reference(lm: dict[str, Any]) -> None:
    """The runtime's voice-clone rows (its SentencePiece tokenizer over the checkpoint's tokenizer.model) equal
    mlx-audio's build_inference_input_ids."""
    pytest.importorskip("sentencepiece")
    from ttscore.runtime.families.moss_tts_nano.tokenizer import MossTokenizer, voice_clone_rows

    if lm["name"] != "tiny":
        pytest.skip("one checkpoint's tokenizer is enough")
    c = lm["c"]
    ref_codes = np.random.default_rng(4).integers(0, c.codebook_size, (5, 16)).astype(np.int64)
    text = "Hello, this is MOSS.\nA second line!"
    ref = _mlx("prompt", lm["ckpt"], {"ref_codes": ref_codes}, {"text": text})
    got = voice_clone_rows(MossTokenizer(lm["ckpt"] / "tokenizer.model"), text, ref_codes, c.audio_pad_id)
    np.testing.assert_array_equal(np.asarray(got), ref["rows"])


def test_tiny_checkpoint_layout(tmp_path: Path) -> None:
    """make-tiny's config.json has every key mlx-audio's config reads and the real key set; `--weights bin` writes
    pytorch_model.bin with the same tensors (tied heads equal), read with weights_only; a missing or an unexpected
    tensor is refused by name."""
    import torch

    from export.moss_tts_nano import lm as lm_mod
    from export.moss_tts_nano.tiny import config, model_weights
    from ttscore.contract.errors import CheckpointError
    from ttscore.runtime.families.moss_tts_nano.checkpoint import check_tensors, parse_config, tied_heads

    cfg = config("tiny")
    for key in ("gpt2_config", "n_vq", "audio_codebook_sizes", "audio_pad_token_id", "local_transformer_layers",
                "audio_tokenizer_pretrained_name_or_path", "audio_tokenizer_sample_rate", "model_architecture"):
        assert key in cfg
    c = parse_config(cfg)
    weights = model_weights(cfg, seed=1)
    assert "local_transformer.wte.weight" not in weights
    for head, tied in tied_heads(c).items():
        assert torch.equal(weights[head], weights[tied])
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    torch.save(weights, tmp_path / "pytorch_model.bin")
    check_tensors(tmp_path, c)
    t = lm_mod.Tensors(tmp_path)
    t.check_ties(c)
    assert torch.equal(t.get("transformer.h.1.attn.c_attn.weight"), weights["transformer.h.1.attn.c_attn.weight"])
    bad = dict(weights)
    del bad["local_transformer.h.0.mlp.fc_in.bias"]
    bad["transformer.h.9.ln_1.weight"] = torch.ones(32)
    torch.save(bad, tmp_path / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match=r"missing 1 tensor\(s\): local_transformer.h.0.mlp.fc_in.bias; "
                                              r"unexpected 1 tensor\(s\): transformer.h.9.ln_1.weight"):
        check_tensors(tmp_path, c)
    bad = dict(weights)
    bad["text_lm_head.weight"] = bad["text_lm_head.weight"] + 1
    torch.save(bad, tmp_path / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="text_lm_head.weight differs from transformer.wte.weight"):
        lm_mod.Tensors(tmp_path).check_ties(c)
    shutil.rmtree(tmp_path)


def test_mlx_environment_has_its_pins_and_no_torch(tmp_path: Path) -> None:
    """.venv-mlx (requirements-mlx.txt) runs the pinned mlx, mlx-audio and transformers on mlx's CPU device, with no
    torch (mlx-audio's reference needs none; a second torch build would be a dependency gone wrong)."""
    import refenv

    _require_mlx()
    script = tmp_path / "probe.py"
    script.write_text(
        "import importlib.metadata as md, importlib.util as u\n"
        "from refenv import serve\n"
        "def fn(inputs):\n"
        "    import mlx.core as mx\n"
        "    names = ('mlx', 'mlx-cpu', 'mlx-audio', 'transformers')\n"
        "    return {'versions': [md.version(n) for n in names], 'torch': u.find_spec('torch') is not None,\n"
        "            'device': str(mx.default_device())}\n"
        "serve(fn)\n")
    got = refenv.run("mlx", script)
    pins = dict(line.split("==") for line in (TESTS.parent / "requirements-mlx.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    assert list(got["versions"]) == [pins[n] for n in ("mlx", "mlx-cpu", "mlx-audio", "transformers")]
    assert list(got["versions"])[:3] == ["0.32.4", "0.32.4", "0.6.2"]
    assert not bool(got["torch"])
    assert "cpu" in str(got["device"])
