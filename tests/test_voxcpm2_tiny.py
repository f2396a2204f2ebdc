"""VoxCPM2 tiny checkpoints: the real on-disk layout, loadable by the reference; and a checkpoint the
project did not make (built from the reference's own config classes) is accepted by our code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from export.voxcpm2.reference import checkpoint_key_diff, load_reference, reference_classes
from export.voxcpm2.tiny import make_tiny_voxcpm2, model_config, tokenizer_config, tokenizer_json
from ttscore.runtime.families.voxcpm2.checkpoint import is_voxcpm2, read_checkpoint

pytestmark = pytest.mark.export


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_voxcpm2(tmp_path_factory.mktemp("vx") / "tiny", seed=3)


def foreign_checkpoint(out: Path) -> Path:
    """A VoxCPM2 checkpoint built directly from the reference package: its config classes, its
    modules' own (torch default) initialization, `model_dump_json` as config.json. Only the
    tokenizer is ours (the reference has no way to make one)."""
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaTokenizerFast

    c = reference_classes()
    cfg = model_config("tiny")
    lm = c["config"].model_fields["lm_config"].annotation(**cfg["lm_config"])
    enc_cls = c["config"].model_fields["encoder_config"].annotation
    dit_cls = c["config"].model_fields["dit_config"].annotation
    cfm = dit_cls.model_fields["cfm_config"].annotation(inference_cfg_rate=2.0)
    config = c["config"](
        lm_config=lm,
        patch_size=4,
        feat_dim=8,
        residual_lm_num_layers=2,
        residual_lm_no_rope=False,  # the other RoPE setting than ours
        scalar_quantization_latent_dim=16,
        encoder_config=enc_cls(hidden_dim=48, ffn_dim=96, num_heads=4, num_layers=1, kv_channels=16),
        dit_config=dit_cls(hidden_dim=48, ffn_dim=96, num_heads=4, num_layers=2, kv_channels=16, cfm_config=cfm),
        audio_vae_config=c["vae_config"](encoder_dim=8, latent_dim=8, decoder_dim=64),
        max_length=512,
        dtype="float32",
    )
    out.mkdir(parents=True)
    (out / "tokenizer.json").write_text(tokenizer_json(), encoding="utf-8")
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config()), encoding="utf-8")
    tok = LlamaTokenizerFast.from_pretrained(str(out))
    torch.manual_seed(11)
    vae = c["vae"](config=config.audio_vae_config)
    model = c["model"](config, tok, vae, device="cpu")
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file({k[len("audio_vae."):]: v for k, v in state.items() if k.startswith("audio_vae.")},
              str(out / "audiovae.safetensors"))
    save_file({k: v for k, v in state.items() if not k.startswith("audio_vae.")}, str(out / "model.safetensors"))
    (out / "config.json").write_text(config.model_dump_json(indent=2), encoding="utf-8")
    return out


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
    ck = foreign_checkpoint(tmp_path / "foreign")
    assert is_voxcpm2(ck)
    info = read_checkpoint(ck)
    assert info.feat_dim == 8 and info.residual.rope and info.dit.num_layers == 2
    model = load_reference(ck)
    assert checkpoint_key_diff(model, ck) == ([], [])
