"""Bounded VoxCPM2 export memory, the machinery of tests/export_tests/test_export_memory.py applied to VoxCPM2:

- StagedVoxCPM2 builds exactly the model `load_reference` (VoxCPM2Model.from_local -> float32)
  builds, with every parameter on the meta device until a stage loads it, and back afterwards;
- a tiny export writes the weights of the traced graphs into `<graph>.onnx.data` (bind_weights)
  and records every stage's peak RSS in the manifest.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

from ttscore.contract.errors import CheckpointError  # noqa: E402

pytestmark = pytest.mark.export

BOUND_GRAPHS = ("base_lm", "residual_lm", "local_encoder", "bridge", "heads", "locdit_step")


def test_staged_voxcpm2_is_the_from_local_model(voxcpm2_tiny: Path) -> None:
    from export.voxcpm2.reference import StagedVoxCPM2, load_reference

    want = load_reference(voxcpm2_tiny)
    staged = StagedVoxCPM2(voxcpm2_tiny)
    model = staged.model
    assert all(p.is_meta for p in model.parameters())  # nothing is read until a stage asks
    assert set(model.state_dict()) == set(want.state_dict())
    # Buffers (RoPE tables, AudioVAE sample-rate buckets) are what from_local + float32 leaves.
    want_buffers = dict(want.named_buffers())
    for name, buf in model.named_buffers():
        assert buf.dtype == want_buffers[name].dtype and torch.equal(buf, want_buffers[name]), name
    for lm in ("base_lm", "residual_lm"):
        assert getattr(model, lm).kv_cache.kv_cache.dtype == torch.float32
    want_params = dict(want.named_parameters())
    with staged.loaded(("base_lm.",), ("base_lm.embed_tokens.",)) as m:
        assert m.base_lm.embed_tokens.weight.is_meta
        for name, p in m.named_parameters():
            if name.startswith("base_lm.") and not name.startswith("base_lm.embed_tokens."):
                assert not p.is_meta and p.dtype == torch.float32 and torch.equal(p, want_params[name]), name
            else:
                assert p.is_meta, name
    assert all(p.is_meta for p in model.parameters())  # put back after the stage
    with staged.loaded(("audio_vae.",)) as m:
        for name, p in m.audio_vae.named_parameters():
            assert torch.equal(p, want_params[f"audio_vae.{name}"]), name


def test_staged_voxcpm2_refuses_mismatching_weights(voxcpm2_tiny: Path, tmp_path: Path) -> None:
    import shutil

    from safetensors.torch import load_file, save_file

    from export.voxcpm2.reference import StagedVoxCPM2

    bad = tmp_path / "bad"
    shutil.copytree(voxcpm2_tiny, bad)
    tensors = load_file(str(bad / "model.safetensors"))
    tensors.pop(sorted(tensors)[0])
    save_file(tensors, str(bad / "model.safetensors"))
    with pytest.raises(CheckpointError, match="missing"):
        StagedVoxCPM2(bad)


def test_export_binds_weights_into_external_data_and_records_stage_peaks(voxcpm2_artifacts: Path) -> None:
    manifest = json.loads((voxcpm2_artifacts / "manifest.json").read_text())
    for name in BOUND_GRAPHS:
        path = voxcpm2_artifacts / manifest["graphs"][name]["file"]
        data = path.with_name(path.name + ".data")
        assert data.is_file() and data.stat().st_size > 0, name
        model = onnx.load(str(path), load_external_data=False)
        external = [t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
        assert external, name
        for t in external:
            info = {e.key: e.value for e in t.external_data}
            assert info["location"] == data.name and int(info["offset"]) % 4096 == 0, (name, t.name)
        meta = {p.key: p.value for p in model.metadata_props}
        assert meta["graph"] == name and "bind_weights" in meta["exporter"]
        assert manifest["graphs"][name]["validation"]["bytes"] >= data.stat().st_size
    memory = manifest["export"]
    stages = memory["stages"]
    assert list(stages) == ["load", "base_lm", "residual_lm", "small", "locdit", "audio_vae"]
    for rec in stages.values():
        assert 0 < rec["start_rss_gib"] <= rec["peak_rss_gib"] and rec["end_rss_gib"] <= rec["peak_rss_gib"]
        assert rec["seconds"] >= 0
    assert memory["peak_stage"] in stages
    assert memory["process_peak_rss_gib"] >= max(r["peak_rss_gib"] for r in stages.values())
