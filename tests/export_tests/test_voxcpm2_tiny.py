"""VoxCPM2 tiny checkpoints: the real on-disk layout, loadable by the reference; and a checkpoint the
project did not make (tests/voxcpm2_foreign.py: the reference's own config classes) is accepted by
our code (its export and parity: tests/export_tests/test_voxcpm2_foreign.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from export.voxcpm2.reference import checkpoint_key_diff, load_reference, reference_classes
from export.voxcpm2.tiny import make_tiny_voxcpm2, model_config
from ttscore.runtime.families.voxcpm2.checkpoint import is_voxcpm2, read_checkpoint

pytestmark = pytest.mark.export


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_voxcpm2(tmp_path_factory.mktemp("vx") / "tiny", seed=3)


def test_tiny_loads_in_the_reference_with_every_tensor(tiny: Path) -> None:
    files = sorted(p.name for p in tiny.iterdir())
    assert files == ["audiovae.safetensors", "config.json", "model.safetensors", "special_tokens_map.json",
                     "tokenizer.json", "tokenizer_config.json"]
    c = reference_classes()
    c["config"].model_validate_json((tiny / "config.json").read_text())  # what from_local parses
    model = load_reference(tiny)  # raises on missing / unexpected tensors
    assert checkpoint_key_diff(model, tiny) == ([], [])
    assert model.sample_rate == 48000 and model._encode_sample_rate == 16000
    assert model.patch_size == 4 and model.chunk_size == 640 and model._decode_chunk_size == 1920
    # The tokenizer is LlamaTokenizerFast; multi-character CJK tokens are split by the reference.
    assert type(model.text_tokenizer.tokenizer).__name__ == "LlamaTokenizerFast"
    pieces = model.text_tokenizer.tokenize("Hello 你好")
    assert "你" in pieces and "你好" not in pieces
    assert all(i is not None and i != 0 for i in model.text_tokenizer("Hello world. 你好世界"))


def test_make_tiny_is_deterministic(tiny: Path, tmp_path: Path) -> None:
    again = make_tiny_voxcpm2(tmp_path / "again", seed=3)
    for name in ("config.json", "tokenizer.json", "model.safetensors", "audiovae.safetensors"):
        assert (again / name).read_bytes() == (tiny / name).read_bytes(), name
    other = make_tiny_voxcpm2(tmp_path / "other", seed=4)
    assert (other / "model.safetensors").read_bytes() != (tiny / "model.safetensors").read_bytes()


def test_make_tiny_refuses_to_replace_other_directories(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        make_tiny_voxcpm2(tmp_path / "x")


def test_our_reader_matches_the_reference(tiny: Path) -> None:
    info = read_checkpoint(tiny)
    assert is_voxcpm2(tiny)
    model = load_reference(tiny)
    assert info.lm.num_layers == len(model.base_lm.layers)
    assert info.residual.num_layers == len(model.residual_lm.layers)
    assert info.residual.rope is (model.residual_lm.rope_emb is not None)
    assert info.encoder.num_layers == len(model.feat_encoder.encoder.layers)
    assert info.dit.hidden_size == model.feat_decoder.estimator.config.hidden_size
    assert info.samples_per_patch == model.patch_size * model._decode_chunk_size
    assert info.encode_samples_per_patch == model.patch_size * model.chunk_size
    assert info.sample_rate == model.sample_rate


def test_real_size_config_parses_in_the_reference() -> None:
    c = reference_classes()
    cfg = c["config"].model_validate(model_config("real"))
    assert cfg.lm_config.hidden_size == 2048 and cfg.lm_config.num_hidden_layers == 28
    assert cfg.audio_vae_config.decoder_dim == 2048


def test_foreign_checkpoint_loads_in_our_code(tmp_path: Path) -> None:
    """tests/voxcpm2_foreign.py: made from the reference's config classes, not by make-tiny."""
    from voxcpm2_foreign import DIT, FEAT_DIM, PATCH_SIZE, RESIDUAL_LAYERS, independent_checkpoint

    ck = independent_checkpoint(tmp_path / "foreign")
    assert is_voxcpm2(ck)
    info = read_checkpoint(ck)
    assert (info.feat_dim, info.patch_size) == (FEAT_DIM, PATCH_SIZE)
    assert info.residual.rope and info.residual.num_layers == RESIDUAL_LAYERS
    assert info.dit.num_layers == DIT["num_layers"] and info.dit.head_dim == DIT["kv_channels"]
    model = load_reference(ck)
    assert checkpoint_key_diff(model, ck) == ([], [])
