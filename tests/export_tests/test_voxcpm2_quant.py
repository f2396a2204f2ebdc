"""VoxCPM2 `export --precision int8|int4`: the Qwen3-TTS quantization path (export.quantize.
quantize_graph) on the base LM, residual LM, local encoder and LocDiT, each graph's error vs fp32
in the manifest (`graphs.<name>.validation.vs_fp32`), the AudioVAE decoder under the vocoder's SNR
rule, and the quantized artifacts loaded by the engine and by `ensure_artifacts` unchanged.
Errors are measurements on random weights, not quality claims: only finiteness is asserted."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from ttscore.contract.manifest import read_manifest

pytestmark = [pytest.mark.export, pytest.mark.slow]

onnx = pytest.importorskip("onnx")

QUANTIZED = ("base_lm", "residual_lm", "local_encoder", "locdit_step")


@pytest.fixture(scope="module")
def int8_artifacts(voxcpm2_tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from export.exporter import export_checkpoint

    out = tmp_path_factory.mktemp("voxcpm2-int8") / "artifacts"
    export_checkpoint(voxcpm2_tiny, out, precision="int8")
    return out


def ops(path: Path) -> set[str]:
    return {n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node}


def test_int8_export_quantizes_and_reports_vs_fp32(int8_artifacts: Path) -> None:
    from export.voxcpm2.exporter import QUANTIZED_GRAPHS

    m = read_manifest(int8_artifacts)
    assert m.precision == "int8" and set(QUANTIZED) < set(QUANTIZED_GRAPHS)
    for name in QUANTIZED:
        entry = m.graphs[name]
        report = entry["validation"]
        print(name, report["vs_fp32"])
        assert report["quantized"].startswith("int8 dynamic (MatMulInteger"), name
        vs = report["vs_fp32"]
        assert vs["max_abs_err"] and all(math.isfinite(v) for v in vs["max_abs_err"].values()), (name, vs)
        assert math.isfinite(vs["snr_db"]) and vs["bytes"] > 0, (name, vs)
        assert report["max_abs_error"], name  # the fp32 graph's validation against PyTorch stays
        path = int8_artifacts / entry["file"]
        assert "MatMulInteger" in ops(path), name
    # The AudioVAE decoder is all convolutions: nothing to quantize, it stays fp32 and says so.
    dec = m.graphs["vae_decoder_stream"]["validation"]
    assert dec["quantized"] is None and dec["vs_fp32"]["kept"].startswith("fp32")
    assert not ops(int8_artifacts / m.graphs["vae_decoder_stream"]["file"]) & {"MatMulInteger", "MatMulNBits"}
    for name in ("bridge", "heads", "vae_encoder"):
        assert "vs_fp32" not in m.graphs[name]["validation"], name
    # No quantized leftovers next to the graphs that replaced the fp32 ones.
    assert not list(int8_artifacts.glob("*.int8*"))


def test_engine_generates_from_int8(int8_artifacts: Path, voxcpm2_artifacts: Path) -> None:
    from ttscore.runtime.engine import Generator
    from ttscore.runtime.families import load_model
    from ttscore.runtime.families.voxcpm2.request import VoxCPM2Request

    pcm = {}
    for label, art in (("fp32", voxcpm2_artifacts), ("int8", int8_artifacts)):
        model = load_model(art)
        events = list(Generator(model, max_batch=1, chunk_policy="fixed").synthesize(
            VoxCPM2Request("Hello world, this is a test.", seed=5, max_new_tokens=6)))
        pcm[label] = np.concatenate([e.pcm for e in events])
        assert pcm[label].size > 0 and np.isfinite(pcm[label]).all()
        assert pcm[label].size % model.info.samples_per_patch == 0
    again = np.concatenate([e.pcm for e in Generator(load_model(int8_artifacts), max_batch=1, chunk_policy="fixed")
                            .synthesize(VoxCPM2Request("Hello world, this is a test.", seed=5, max_new_tokens=6))])
    assert np.array_equal(again, pcm["int8"])  # same seed -> same audio, quantized too


def test_ensure_artifacts_honours_the_precision(voxcpm2_tiny: Path, int8_artifacts: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from export import exporter
    from triton_tts.artifacts import ensure_artifacts

    target = tmp_path / "art"
    shutil.copytree(int8_artifacts, target)
    calls: list[str] = []

    def fake_export(src: Path, out: Path, *, precision: str = "fp32", **_: object) -> dict[str, object]:
        calls.append(precision)
        return {}

    monkeypatch.setattr(exporter, "export_checkpoint", fake_export)
    assert ensure_artifacts(voxcpm2_tiny, "int8", out=target, quiet=True) == target
    assert calls == []  # an int8 export of this checkpoint is current for int8
    ensure_artifacts(voxcpm2_tiny, "fp32", out=target, quiet=True)
    ensure_artifacts(voxcpm2_tiny, "int4", out=target, quiet=True)
    assert calls == ["fp32", "int4"]  # ...and not for another precision


def test_ensure_artifacts_remakes_an_export_of_an_older_revision(voxcpm2_tiny: Path, int8_artifacts: Path,
                                                                 tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An export made at an older revision of its family's export format (an older release's cache) is re-made
    instead of served: the manifest's `export_revision` against export.family.ExportFamily.revision."""
    import json
    import shutil

    from export import exporter
    from export.families import FAMILIES
    from triton_tts.artifacts import ensure_artifacts
    from ttscore.contract.manifest import read_manifest

    target = tmp_path / "art"
    shutil.copytree(int8_artifacts, target)
    revision = FAMILIES["voxcpm2"].revision
    assert read_manifest(target).export_revision == revision  # written by the export
    calls: list[str] = []
    monkeypatch.setattr(exporter, "export_checkpoint", lambda src, out, *, precision="fp32", **_: calls.append(precision))
    for older in (revision - 1, None):  # an older one, and a manifest from before the field
        raw = json.loads((target / "manifest.json").read_text())
        raw.pop("export_revision")
        if older is not None:
            raw["export_revision"] = older
        (target / "manifest.json").write_text(json.dumps(raw))
        ensure_artifacts(voxcpm2_tiny, "int8", out=target, quiet=True)
    assert calls == ["int8", "int8"]


def test_int4_through_the_same_path(voxcpm2_artifacts: Path, voxcpm2_tiny: Path, tmp_path: Path) -> None:
    """int4 (MatMulNBits) comes from the same quantize_graph call, graph by graph."""
    import shutil

    from export.voxcpm2.exporter import _quantize
    from ttscore.runtime.families.voxcpm2.checkpoint import read_checkpoint

    info = read_checkpoint(voxcpm2_tiny)
    m = read_manifest(voxcpm2_artifacts)
    for name in QUANTIZED:
        file = m.graphs[name]["file"]
        for suffix in ("", ".data"):
            if (voxcpm2_artifacts / f"{file}{suffix}").exists():
                shutil.copy2(voxcpm2_artifacts / f"{file}{suffix}", tmp_path / f"{file}{suffix}")
        rep = _quantize(info, tmp_path / file, name, "int4")
        print(name, "int4", rep["vs_fp32"])
        assert rep["quantized"].startswith("int4") and math.isfinite(rep["vs_fp32"]["snr_db"])
        assert "MatMulNBits" in ops(tmp_path / file) and not list(tmp_path.glob("*.int4*"))
