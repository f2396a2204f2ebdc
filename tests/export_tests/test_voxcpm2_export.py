"""VoxCPM2 export: every graph validated against the reference during export, and the manifest.
A checkpoint the project did not make exports too: tests/export_tests/test_voxcpm2_foreign.py; int8/int4:
tests/export_tests/test_voxcpm2_quant.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ttscore.contract import voxcpm2 as spec
from ttscore.contract.errors import ArtifactError
from ttscore.contract.kv import cuts_past_to_mask
from ttscore.contract.manifest import read_manifest
from ttscore.runtime.families.voxcpm2.model import VoxCPM2Model

pytestmark = [pytest.mark.export, pytest.mark.slow]


def test_manifest_and_graphs(voxcpm2_artifacts: Path) -> None:
    m = read_manifest(voxcpm2_artifacts)
    assert m.family == spec.FAMILY and m.sample_rate == spec.SAMPLE_RATE
    assert m.samples_per_frame == 4 * 1920
    assert set(m.graphs) == set(spec.GRAPH_NAMES)
    for name, entry in m.graphs.items():
        report = entry["validation"]
        assert report["max_abs_error"], name
        assert max(report["max_abs_error"].values()) <= 1e-4, (name, report)  # measured <= ~5e-6
        assert (voxcpm2_artifacts / entry["file"]).is_file()
    raw = json.loads((voxcpm2_artifacts / "manifest.json").read_text())
    assert raw["vocoder"]["state_size"] == sum(c * n for c, n in raw["vocoder"]["state_layout"])
    assert (voxcpm2_artifacts / "tokenizer" / "tokenizer.json").is_file()
    assert (voxcpm2_artifacts / "text_embeddings.npy").is_file()
    # The residual LM has no RoPE (as released): its graph takes no position ids.
    assert "position_ids" not in [t["name"] for t in m.graphs["residual_lm"]["inputs"]]


def test_lm_graphs_cut_their_past_and_an_export_without_the_cut_is_refused(voxcpm2_artifacts: Path,
                                                                             tmp_path: Path) -> None:
    """Both LMs cut their past to the mask (ttscore.contract.kv), which their manifest entries say; the runtime's
    exact arenas feed them rows longer than the mask, so an export without it is refused (re-export)."""
    m = read_manifest(voxcpm2_artifacts)
    assert sorted(n for n, e in m.graphs.items() if cuts_past_to_mask(e)) == ["base_lm", "residual_lm"]
    old = tmp_path / "old"
    old.mkdir()
    for p in voxcpm2_artifacts.iterdir():
        if p.name != "manifest.json":
            (old / p.name).symlink_to(p)
    raw = json.loads((voxcpm2_artifacts / "manifest.json").read_text())
    del raw["graphs"]["residual_lm"]["past_cut_to_mask"]
    (old / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(ArtifactError, match="residual_lm does not cut its past to the mask.*re-export"):
        VoxCPM2Model(old, read_manifest(old), vocoder=False, encoders=False)
