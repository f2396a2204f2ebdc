"""ttscore.backend.repository: the committed configs and the strict renderer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from deploy_plans import served_from_manifest

from ttscore.backend import repository as r

pytestmark = pytest.mark.unit


def test_committed_repository_is_clean_and_valid():
    models = r.committed_models()
    assert set(models) == {
        "code2wav", "speech_generation", "voice_features", "audio_preprocess", "speaker_encoder", "speech_encoder",
        "audiovae_decoder", "audiovae_encoder", "breeze_speech_encoder", "codec_encoder", "dac_encoder",
        "prompt_encoder", "moss_codec_encoder", "forced_aligner",
    }
    configs = {name: r.load_config(path / "config.pbtxt") for name, path in models.items()}
    for config in configs.values():
        r.check_config(config)
    r.check_ensembles(configs)
    for name, path in models.items():
        if configs[name].backend == "python":
            assert (path / "1" / "model.py").is_file()



def test_every_committed_model_but_speech_generation_is_one_registered_familys():
    from ttscore.backend import families

    declared = [m.name for f in families.FAMILIES.values() for m in f.models]
    assert len(declared) == len(set(declared)), "a Triton model is declared by two families"
    assert not set(declared) & set(families.COMPONENT_MODELS)
    assert {*declared, "speech_generation", *families.COMPONENT_MODELS} == set(r.committed_models())
    for family in families.FAMILIES.values():
        names = {m.name for m in family.models}
        # None: the family has no such model (its vocoder runs inline in speech_generation; no voice features)
        assert {family.vocoder, family.voice_features} - {None} <= names
        for model in family.models:
            assert families.family_of_model(model.name) is family
    assert families.family_of_model("speech_generation") is None
    assert r.graph_spec_for("speech_generation") is None and r.vocoder_state_key("code2wav") == "code2wav_state_size"

def test_python_models_use_only_python310_syntax():
    import ast

    for path in Path(r.SOURCE_REPOSITORY).glob("*/1/model.py"):
        ast.parse(path.read_text(), feature_version=(3, 10))
    root = Path(r.__file__).resolve().parents[1]  # the ttscore package
    for path in root.rglob("*.py"):
        ast.parse(path.read_text(), feature_version=(3, 10))


def test_render_applies_settings(tmp_path):
    out = r.render_repository(
        tmp_path / "out",
        {
            "code2wav": {"instances": 3, "kind": "gpu", "max_batch_size": 16, "max_queue_delay_us": 250,
                         "preferred_batch_sizes": [4, 8]},
            "speech_generation": {"parameters": {"max_active_requests": 2}},
        },
        artifacts_dir="/srv/artifacts",
    )
    c2w = r.load_config(out / "code2wav" / "config.pbtxt")
    assert c2w.instance_group[0].count == 3 and c2w.instance_group[0].kind == r.mc.ModelInstanceGroup.KIND_GPU
    assert c2w.max_batch_size == 16
    assert c2w.dynamic_batching.max_queue_delay_microseconds == 250
    assert list(c2w.dynamic_batching.preferred_batch_size) == [4, 8]
    assert c2w.parameters["artifacts_dir"].string_value == "/srv/artifacts"
    sg = r.load_config(out / "speech_generation" / "config.pbtxt")
    assert sg.parameters["max_active_requests"].string_value == "2"
    assert sg.parameters["artifacts_dir"].string_value == "/srv/artifacts"
    assert (out / "speech_generation" / "1" / "model.py").is_file()
    assert (out / "voice_features" / "1").is_dir()
    assert not (out / "README.md").exists()
    # The committed sources are untouched.
    assert r.load_config(r.SOURCE_REPOSITORY / "code2wav" / "config.pbtxt").instance_group[0].count == 1


def test_per_model_artifacts_dir_wins(tmp_path):
    out = r.render_repository(
        tmp_path / "o", {"code2wav": {"parameters": {"artifacts_dir": "/a"}}}, artifacts_dir="/b", models=["code2wav"]
    )
    assert r.load_config(out / "code2wav" / "config.pbtxt").parameters["artifacts_dir"].string_value == "/a"


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"code2wave": {"instances": 2}}, "unknown model"),
        ({"code2wav": {"instance": 2}}, "unknown setting"),
        ({"code2wav": {"instances": 0}}, "instances must be an integer >= 1"),
        ({"code2wav": {"instances": "2"}}, "instances must be an integer"),
        ({"code2wav": {"kind": "tpu"}}, "kind must be one of"),
        ({"code2wav": {"parameters": {"artifact_dir": "/x"}}}, "unknown parameter 'artifact_dir'"),
        ({"code2wav": {"max_batch_size": 4, "preferred_batch_sizes": [8]}}, "exceed max_batch_size"),
        ({"speech_generation": {"max_batch_size": 4}}, "does not batch"),
        ({"speech_generation": {"max_queue_delay_us": 10}}, "no dynamic_batching"),
        ({"voice_features": {"instances": 2}}, "ensemble"),
    ],
)
def test_render_refuses_bad_settings(tmp_path, settings, match):
    with pytest.raises(r.RepositoryError, match=match):
        r.render_repository(tmp_path / "out", settings)


def test_render_subset_checks_ensemble_dependencies(tmp_path):
    with pytest.raises(r.RepositoryError, match="audio_preprocess"):
        r.render_repository(tmp_path / "out", models=["voice_features"])
    out = r.render_repository(tmp_path / "out", models=["code2wav"])
    assert [p.name for p in out.iterdir()] == ["code2wav"]


def _copy_source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    shutil.copytree(r.SOURCE_REPOSITORY, src, ignore=shutil.ignore_patterns("__pycache__"))
    return src


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


@pytest.mark.parametrize(
    ("model", "old", "new", "match"),
    [
        ("code2wav", 'name: "new_state"', 'name: "next_state"', "differ from the graph"),
        ("code2wav", "dims: [ -1, 16 ]", "dims: [ -1, 8 ]", "do not fit the graph"),
        ("code2wav", "data_type: TYPE_INT64\n    dims: [ 1 ]", "data_type: TYPE_INT32\n    dims: [ 1 ]", "position is TYPE_INT32"),
        ("speaker_encoder", "dims: [ -1, 128 ]", "dims: [ -1, 80 ]", "do not fit"),
        ("speech_generation", '{ name: "seed" data_type: TYPE_INT64', '{ name: "seed" data_type: TYPE_INT32', "seed is TYPE_INT32"),
        ("speech_generation", '{ name: "top_k" data_type: TYPE_INT32 dims: [ 1 ] optional: true }',
         '{ name: "top_k" data_type: TYPE_INT32 dims: [ 1 ] }', "optional"),
        ("speech_generation", "model_transaction_policy { decoupled: true }", "", "decoupled"),
        ("voice_features", 'output_map { key: "codes" value: "ref_codes" }',
         'output_map { key: "code" value: "ref_codes" }', "no output 'code'"),
    ],
)
def test_contract_checks(tmp_path, model, old, new, match):
    src = _copy_source(tmp_path)
    _edit(src / model / "config.pbtxt", old, new)
    with pytest.raises(r.RepositoryError, match=match):
        r.render_repository(tmp_path / "out", source=src)


def test_state_dims_checked_against_a_local_manifest(tmp_path):
    art = tmp_path / "art"
    art.mkdir()
    (art / "manifest.json").write_text(json.dumps({"format_version": 1, "code2wav": {"state_size": 12}}))
    src = _copy_source(tmp_path)
    _edit(src / "code2wav" / "config.pbtxt", "dims: [ -1 ]  # manifest", "dims: [ 10 ]  # manifest")
    with pytest.raises(r.RepositoryError, match="state_size 12"):
        r.render_repository(tmp_path / "out", artifacts_dir=art, models=["code2wav"], source=src)


def test_stray_root_entries_are_refused(tmp_path):
    src = _copy_source(tmp_path)
    (src / "notes.txt").write_text("x")
    with pytest.raises(r.RepositoryError, match="unexpected file"):
        r.committed_models(src)
    (src / "notes.txt").unlink()
    (src / "scratch").mkdir()
    with pytest.raises(r.RepositoryError, match="no config.pbtxt"):
        r.committed_models(src)


def test_cli(tmp_path, capsys):
    settings = tmp_path / "deploy.json"
    settings.write_text(json.dumps({"artifacts_dir": "/art", "models": {"code2wav": {"instances": 2}}}))
    rc = r.main(["--out", str(tmp_path / "o"), "--settings", str(settings), "--set", "code2wav.kind=gpu",
                 "--set", "speech_generation.parameters.max_active_requests=16"])
    assert rc == 0
    c2w = r.load_config(tmp_path / "o" / "code2wav" / "config.pbtxt")
    assert c2w.instance_group[0].count == 2 and c2w.instance_group[0].kind == r.mc.ModelInstanceGroup.KIND_GPU
    sg = r.load_config(tmp_path / "o" / "speech_generation" / "config.pbtxt")
    assert sg.parameters["max_active_requests"].string_value == "16"
    assert sg.parameters["artifacts_dir"].string_value == "/art"
    assert r.main(["--out", str(tmp_path / "o2"), "--set", "code2wav.instancez=2"]) == 2
    assert "unknown setting" in capsys.readouterr().err


def test_readme_documents_the_public_tensors_exactly():
    from ttscore.contract import tensors as triton_io

    text = (Path(r.SOURCE_REPOSITORY) / "README.md").read_text()
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`") and cells[1] in triton_io.NUMPY_DTYPES:
            rows.setdefault(cells[0].strip("`"), []).append((cells[1], cells[2]))
    encoders = [t for m in ("audiovae_encoder", "breeze_speech_encoder", "forced_aligner")
                for io in triton_io.PUBLIC_MODELS[m] for t in io]
    for t in (*triton_io.SPEECH_INPUTS, *triton_io.SPEECH_OUTPUTS, *encoders):
        dims = "[" + ", ".join(str(d) for d in t.dims) + "]"
        assert (t.dtype, dims) in rows.get(t.name, []), f"README row for {t.name} is missing or stale"


def test_mixed_deployment_renders_qwen_and_voxcpm2_side_by_side(tmp_path):
    from triton_tts.serve import gateway_config, plan_deployment

    tok = {"source": {"files": {"speech_tokenizer/model.safetensors": {"sha256": "same"}}}, "code2wav": {"state_size": 12}}
    served = [
        served_from_manifest(tmp_path, "cv", {"family": "qwen3_tts", "variant": "custom_voice", **tok}),
        served_from_manifest(tmp_path, "base", {"family": "qwen3_tts", "variant": "base", **tok}),
        served_from_manifest(tmp_path, "vox", {"family": "voxcpm2", "variant": "base", "vae_decoder": {"state_size": 7}}),
    ]
    plan = plan_deployment(served)
    assert plan["shared_code2wav"]  # the VoxCPM2 checkpoint has no speech tokenizer: it does not break sharing
    assert set(plan["models"]) == {
        "speech_generation_cv", "speech_generation_base", "speech_generation_vox", "code2wav",
        "voice_features", "audio_preprocess", "speaker_encoder", "speech_encoder", "audiovae_decoder", "audiovae_encoder",
    }
    params = {m: plan["settings"][m]["parameters"] for m in ("speech_generation_cv", "speech_generation_vox")}
    assert params["speech_generation_cv"]["vocoder"] == "code2wav"
    assert params["speech_generation_vox"]["vocoder"] == "audiovae_decoder"
    assert plan["settings"]["audiovae_decoder"]["parameters"]["artifacts_dir"] == str(tmp_path / "vox")
    out = r.render_repository(tmp_path / "repo", plan["settings"], models=plan["models"], aliases=plan["aliases"])
    assert {p.name for p in out.iterdir()} == set(plan["models"])
    dec = r.load_config(out / "audiovae_decoder" / "config.pbtxt")
    assert dec.parameters["artifacts_dir"].string_value == str(tmp_path / "vox")
    config = gateway_config(served, "127.0.0.1:8001", plan)
    by_name = {m["name"]: m for m in config["models"]}
    assert by_name["vox"]["voice_features_model"] == "audiovae_encoder"
    assert by_name["vox"]["aliases"] == ["openbmb/vox"] and by_name["base"]["aliases"] == ["Qwen/base"]
    assert by_name["cv"]["voice_features_model"] is None and by_name["base"]["voice_features_model"] == "voice_features"
    assert config["readiness_models"] == ["code2wav", "audiovae_decoder"]
    # two VoxCPM2 checkpoints: one decoder/encoder pair each, named after the checkpoint
    two = plan_deployment([*served, served_from_manifest(tmp_path, "vox2", {"family": "voxcpm2", "variant": "base",
                                                                   "vae_decoder": {"state_size": 7}})])
    assert {"audiovae_decoder_vox", "audiovae_encoder_vox2"} <= set(two["models"])
    assert two["settings"]["speech_generation_vox2"]["parameters"]["vocoder"] == "audiovae_decoder_vox2"


def test_voxcpm2_decoder_state_dims_checked_against_its_manifest(tmp_path):
    vox = served_from_manifest(tmp_path, "vox", {"family": "voxcpm2", "variant": "base", "vae_decoder": {"state_size": 7}})
    src = tmp_path / "src"
    shutil.copytree(r.SOURCE_REPOSITORY, src)
    cfg = src / "audiovae_decoder" / "config.pbtxt"
    cfg.write_text(cfg.read_text().replace("dims: [ -1 ]  # manifest vae_decoder", "dims: [ 9 ]  # manifest vae_decoder"))
    with pytest.raises(r.RepositoryError, match="audiovae_decoder: state dims"):
        r.render_repository(tmp_path / "o", {"audiovae_decoder": {"parameters": {"artifacts_dir": str(vox.artifacts)}}},
                            models=["audiovae_decoder"], source=src)
