"""export/families.py: a checkpoint's family is found by its entry's `detect`; `make-tiny`, `prepare`
and `serve` plan any registered family, one found through ttscore.contract.plugins included."""

from __future__ import annotations

import importlib
import json
import sys
import textwrap
from pathlib import Path

import pytest
from deploy_plans import served_from_manifest

from ttscore.contract.errors import CheckpointError

pytestmark = pytest.mark.unit


def _config(path: Path, cfg: dict) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(cfg))
    return path


def test_family_of_a_checkpoint_is_its_config(tmp_path):
    from export.families import FAMILIES, family_of

    assert family_of(_config(tmp_path / "q", {"model_type": "qwen3_tts"})) is FAMILIES["qwen3_tts"]
    assert family_of(_config(tmp_path / "v", {"lm_config": {}, "dit_config": {}})) is FAMILIES["voxcpm2"]
    with pytest.raises(CheckpointError, match="does not exist"):
        family_of(tmp_path / "nope")
    with pytest.raises(CheckpointError, match="not a checkpoint of a known model family .*qwen3_tts: .*voxcpm2: "):
        family_of(_config(tmp_path / "x", {"model_type": "llama"}))


def test_every_entry_is_complete():
    """Every served family (one with a Triton backend) has a demo; a family not served yet has none, so
    `serve` and `prepare --demo` never build a demo they cannot serve."""
    from export.families import DEFAULT, FAMILIES
    from ttscore.backend.families import FAMILIES as SERVED

    assert DEFAULT in FAMILIES
    for name, family in FAMILIES.items():
        assert family.name == name and family.display and family.hub_org and family.sizes
        assert bool(family.demo) == (name in SERVED), name
        assert family.sizes[0] == "tiny"


def test_every_lazy_entry_point_resolves_within_its_layers():
    """The kit's `lazy` targets (export.family) import and name a callable, and point only at export/ or the
    runtime (what the export layer may import)."""
    from export.families import FAMILIES

    targets = []
    for family in FAMILIES.values():
        for entry in (family.detect, family.check, family.export, family.make_tiny):
            target = getattr(entry, "target", None)
            if target is not None:
                targets.append(target)
                module, _, name = target.partition(":")
                assert module.startswith(("export.", "ttscore.runtime.")), target
                assert callable(getattr(importlib.import_module(module), name)), target
    assert len(targets) >= 24  # six families declared with the kit (four entries each)


def test_make_tiny_refuses_another_familys_options(capsys):
    from triton_tts.cli import main

    assert main(["make-tiny", "--family", "voxcpm2", "--out", "/nonexistent/x", "--variant", "base"]) == 2
    assert "--variant is a Qwen3-TTS option (not --family voxcpm2)" in capsys.readouterr().err
    assert main(["make-tiny", "--family", "voxcpm2", "--out", "/nonexistent/x", "--variant", "base", "--greedy"]) == 2
    assert "--variant/--greedy are Qwen3-TTS options (not --family voxcpm2)" in capsys.readouterr().err
    assert main(["make-tiny", "--family", "voxcpm2", "--out", "/nonexistent/x", "--size", "1.7b"]) == 2
    assert "--family voxcpm2 takes --size tiny or real" in capsys.readouterr().err
    assert main(["make-tiny", "--out", "/nonexistent/x"]) == 2
    assert "--variant is required for --family qwen3_tts" in capsys.readouterr().err


PLUGIN = '''
from export.family import Deployment, ExportFamily, model_name


def detect(path):
    return (path / "config.json").is_file() and "toy" in (path / "config.json").read_text()


def deploy(served):
    plan = Deployment()
    for s in served:
        plan.vocoder[s.name] = model_name("toy_vocoder", s, len(served) == 1)
        plan.voice_features[s.name] = None
        plan.models.append((plan.vocoder[s.name], "toy_vocoder", {"artifacts_dir": str(s.artifacts)}))
        plan.readiness.append(plan.vocoder[s.name])
    return plan


FAMILY = ExportFamily(name="toy", display="Toy", hub_org="toyorg", signature="config.json naming toy",
                      detect=detect, check=lambda path: None, export=None, make_tiny=None, sizes=("tiny",),
                      deploy=deploy, demo=(("Toy-tiny", {}),))
'''


@pytest.fixture
def toy_family(tmp_path, monkeypatch):
    """A family package outside the project (TTS_FAMILY_PACKAGES), export layer only."""
    pkg = tmp_path / "site" / "toy_family"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "export.py").write_text(textwrap.dedent(PLUGIN))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("TTS_FAMILY_PACKAGES", "toy_family")
    import export.families

    yield importlib.reload(export.families)
    monkeypatch.delenv("TTS_FAMILY_PACKAGES")
    for name in [m for m in sys.modules if m.startswith("toy_family")]:
        del sys.modules[name]
    importlib.reload(export.families)


def test_a_plugin_family_is_detected_and_planned_beside_the_built_in_ones(toy_family, tmp_path):
    from triton_tts.serve import gateway_config, plan_deployment

    assert toy_family.family_of(_config(tmp_path / "ck", {"model_type": "toy"})).name == "toy"
    served = [
        served_from_manifest(tmp_path, "t1", {"family": "toy", "variant": "x"}),
        served_from_manifest(tmp_path, "t2", {"family": "toy", "variant": "x"}),
        served_from_manifest(tmp_path, "vox", {"family": "voxcpm2", "variant": "base", "vae_decoder": {"state_size": 7}}),
    ]
    plan = plan_deployment(served)
    assert plan["settings"]["speech_generation_t2"]["parameters"]["vocoder"] == "toy_vocoder_t2"
    assert plan["aliases"]["toy_vocoder_t1"] == "toy_vocoder"
    assert plan["vocoders"] == ["audiovae_decoder", "toy_vocoder_t1", "toy_vocoder_t2"]
    config = gateway_config(served, "127.0.0.1:8001", plan)
    assert config["models"][0]["aliases"] == ["toyorg/t1"]


def test_serve_refuses_an_unregistered_family(tmp_path):
    from triton_tts.serve import ServeError, plan_deployment

    with pytest.raises(ServeError, match="cannot serve model family 'nope' \\(known: qwen3_tts, voxcpm2"):
        plan_deployment([served_from_manifest(tmp_path, "n", {"family": "nope"})])


@pytest.mark.parametrize("module, function", [
    ("breeze_tts_2", "export_breeze"), ("cosyvoice3", "export_cosyvoice3"), ("fish_speech", "export_fish"),
    ("gepard", "export_gepard"), ("moss_tts_nano", "export_moss"), ("omnivoice", "export_omnivoice"),
    ("voxtral_tts", "export_voxtral"),
])
def test_a_quantizing_exporter_refuses_an_unknown_precision_before_reading_anything(module, function, tmp_path):
    """400 naming `precision` (export.quantize.fp32_int8_int4), raised before the checkpoint is opened: the
    source here does not exist, so any other error means the check came too late."""
    from ttscore.contract.errors import InvalidRequest

    export = getattr(importlib.import_module(f"export.{module}.exporter"), function)
    with pytest.raises(InvalidRequest, match=r"exports fp32, int8 or int4 \(got --precision bf16\)") as err:
        export(tmp_path / "no-checkpoint", tmp_path / "out", "bf16", None, {})
    assert err.value.param == "precision"
    assert not (tmp_path / "out").exists()


def test_stage_runner_reports_each_stage_as_step_i_of_n_and_measures_it(caplog):
    from export.stages import StageRunner

    seen: list[tuple[int, int, str]] = []
    with caplog.at_level("INFO", logger="export.stages"):
        with StageRunner(["load", "graph"], lambda i, n, label: seen.append((i, n, label)), "int8", family="test",
                         source={}) as run:
            run.graph("graph", lambda: {"file": "graph.onnx"})
            run.quantize(["graph"], lambda name: {"quantized": name})
    assert seen == [(2, 4, "graph"), (3, 4, "int8 quantization"), (4, 4, "manifest")]
    assert [r.getMessage() for r in caplog.records if r.name == "export.stages"] == [
        "export stage: graph", "export stage: int8 quantization", "export stage: manifest"]
    assert run.reports == {"graph": {"file": "graph.onnx", "quantized": "graph"}}
    assert set(run.memory["stages"]) == {"graph", "int8_graph"}
    with StageRunner(["load"], None, family="test", source={}) as quiet:  # no progress callback: only logged; fp32 has no quantization
        quiet.announce("load")
        quiet.quantize(["graph"], lambda name: {})
    assert quiet.labels == ["load", "manifest"]
    with pytest.raises(ValueError):
        run.announce("not a stage")
