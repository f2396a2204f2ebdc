"""VoxCPM2 startup LoRA adapters (export/voxcpm2/lora.py, `--lora DIR`).

- The exported pipeline with the tiny adapter merged equals the reference with the same adapter
  applied its own way (voxcpm 2.0.3's LoRALinear layers, `load_lora_weights`), diffusion noise fed
  identically: audio within the parity tolerance (1e-4, tests/export_tests/test_voxcpm2_parity.py).
- The adapter changes the output (the same request without it differs by far more than tolerance).
- Our merge equals vLLM-Omni 0.30.0's `merge_voxcpm2_lora` (the format's definition), weight by weight.
- Every failure kind (missing / unexpected / non-finite / wrongly shaped / non-float tensor, PEFT
  and pickle checkpoints, bad config) fails the export before any graph, naming the tensor or file.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from checkpoint_layouts import copy_of, edit_safetensors

from export.voxcpm2.lora import CONFIG, WEIGHTS, LoraError, identity
from export.voxcpm2.reference import fed_noise, load_reference
from ttscore.runtime.engine import Generator
from ttscore.runtime.families import load_model
from ttscore.runtime.families.voxcpm2.model import VoxCPM2Model
from ttscore.runtime.families.voxcpm2.request import VoxCPM2Request

TOL = 1e-4
TEXT = "Hello world, this is a test."


@pytest.fixture(scope="module")
def lora(voxcpm2_lora: Path) -> Path:
    return voxcpm2_lora


@pytest.fixture(scope="module")
def lora_artifacts(voxcpm2_lora_artifacts: Path) -> Path:
    return voxcpm2_lora_artifacts


def noise(model: VoxCPM2Model, seed: int) -> Any:
    rng = np.random.default_rng(seed)
    d, p = model.info.feat_dim, model.info.patch_size
    while True:
        yield rng.standard_normal((d, p), dtype=np.float32)[None]


def ours(model: VoxCPM2Model, req: VoxCPM2Request) -> np.ndarray:
    return np.concatenate([e.pcm for e in Generator(model, max_batch=1, chunk_policy="fixed").synthesize(req)])


@pytest.mark.parity
@pytest.mark.slow
def test_merged_export_equals_the_references_lora(voxcpm2_tiny: Path, lora: Path, lora_artifacts: Path,
                                                   voxcpm2_artifacts: Path) -> None:
    model = load_model(lora_artifacts)
    assert isinstance(model, VoxCPM2Model)
    ref = load_reference(voxcpm2_tiny, lora=lora)  # LoRALinear layers, not merged
    with fed_noise(noise(model, 5)):
        want = ref.generate(TEXT, max_len=14)[0].numpy()
    got = ours(model, VoxCPM2Request(TEXT, seed=5, max_new_tokens=14))
    assert got.shape == want.shape
    err = float(np.abs(got - want).max())
    assert err <= TOL
    # Without the adapter the same request and noise give other audio: the merge is what matched.
    base = ours(load_model(voxcpm2_artifacts), VoxCPM2Request(TEXT, seed=5, max_new_tokens=14))
    n = min(base.shape[0], got.shape[0])
    assert base.shape != got.shape or float(np.abs(base[:n] - got[:n]).max()) > 100 * TOL
    # And the reference with its LoRA disabled agrees with the base export, not the merged one.
    ref.set_lora_enabled(False)
    with fed_noise(noise(model, 5)):
        off = ref.generate(TEXT, max_len=14)[0].numpy()
    assert off.shape == base.shape and float(np.abs(off - base).max()) <= TOL


def test_manifest_records_the_adapter(lora: Path, lora_artifacts: Path) -> None:
    from ttscore.contract.manifest import read_manifest

    manifest = read_manifest(lora_artifacts)
    assert manifest.adapter is not None
    want = identity(lora)
    assert {k: manifest.adapter[k] for k in want} == want
    assert manifest.adapter["name"] == "tiny-adapter" and manifest.adapter["r"] == 4
    assert manifest.adapter["alpha"] == 8.0 and manifest.adapter_sha256 == want["sha256"]
    assert manifest.adapter["merged_layers"] > 0


def _vllm_omni_merge() -> Any:
    """vLLM-Omni 0.30.0's voxcpm2/lora.py, loaded from the wheel (it imports only torch and safetensors)."""
    import importlib.util
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from vllm_omni_source import require_wheel

    with zipfile.ZipFile(require_wheel()) as zf:
        source = zf.read("vllm_omni/model_executor/models/voxcpm2/lora.py").decode()
    spec = importlib.util.spec_from_loader("vllm_omni_voxcpm2_lora", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    exec(compile(source, "vllm_omni/model_executor/models/voxcpm2/lora.py", "exec"), module.__dict__)
    return module.merge_voxcpm2_lora


def test_merge_equals_vllm_omnis(voxcpm2_tiny: Path, lora: Path) -> None:
    from export.voxcpm2.reference import StagedVoxCPM2

    merge = _vllm_omni_merge()
    theirs = load_reference(voxcpm2_tiny)
    count = merge(str(lora), base_lm=theirs.base_lm, residual_lm=theirs.residual_lm, tts=theirs)
    staged = StagedVoxCPM2(voxcpm2_tiny, lora)
    assert staged.adapter is not None and len(staged.adapter.targets) == count
    base = load_reference(voxcpm2_tiny)
    prefixes = ("base_lm.", "residual_lm.", "feat_decoder.", "enc_to_lm_proj.", "lm_to_dit_proj.",
                "res_to_dit_proj.", "fusion_concat_proj.")
    with staged.loaded(prefixes) as mine:
        for name in staged.adapter.targets:
            w = mine.get_submodule(name).weight
            assert float((w - theirs.get_submodule(name).weight).abs().max()) <= 1e-6, name
            assert float((w - base.get_submodule(name).weight).abs().max()) > 1e-3, name  # it did change
    assert staged.merged == set(staged.adapter.targets)


# --- failures: each fails the export before any graph is written, naming what is wrong ---------

def _edit_config(path: Path, **changes: Any) -> None:
    raw = json.loads((path / CONFIG).read_text())
    raw["lora_config"].update(changes)
    (path / CONFIG).write_text(json.dumps(raw))


Q0 = "base_lm.layers.0.self_attn.q_proj"


def _missing(s: dict[str, Any]) -> None:
    del s[f"{Q0}.lora_B"]


def _unexpected(s: dict[str, Any]) -> None:
    s["base_lm.layers.0.mlp.gate_proj.lora_A"] = s[f"{Q0}.lora_A"].clone()


def _non_finite(s: dict[str, Any]) -> None:
    s[f"{Q0}.lora_A"][0, 0] = float("nan")


def _wrong_shape(s: dict[str, Any]) -> None:
    s[f"{Q0}.lora_B"] = s[f"{Q0}.lora_B"][:-1].contiguous()


def _not_float(s: dict[str, Any]) -> None:
    s[f"{Q0}.lora_A"] = s[f"{Q0}.lora_A"].to(dtype=__import__("torch").int32)


@pytest.mark.parametrize(("edit", "message"), [
    (_missing, f"1 missing (e.g. {Q0}.lora_B)"),
    (_unexpected, "1 unexpected (e.g. base_lm.layers.0.mlp.gate_proj.lora_A)"),
    (_non_finite, f"tensor {Q0}.lora_A holds non-finite values"),
    (_wrong_shape, f"tensor {Q0}.lora_B has shape"),
    (_not_float, f"tensor {Q0}.lora_A is torch.int32"),
])
def test_a_corrupt_adapter_fails_naming_the_tensor(voxcpm2_tiny: Path, lora: Path, tmp_path: Path, edit: Any,
                                                    message: str) -> None:
    from export.exporter import export_checkpoint

    bad = copy_of(lora, tmp_path / "bad")
    edit_safetensors(bad / WEIGHTS, edit)
    with pytest.raises(LoraError, match=None) as err:
        export_checkpoint(voxcpm2_tiny, tmp_path / "out", lora=bad)
    assert message in str(err.value)
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.partial-*"))


@pytest.mark.parametrize(("changes", "message"), [
    ({"r": 8}, f"tensor {Q0}.lora_A has shape (4,"),  # a mismatched adapter: another rank
    ({"r": 0}, "lora_config.r must be a positive integer"),
    ({"alpha": "16"}, "lora_config.alpha must be a finite number"),
    ({"enable_lm": "yes"}, "lora_config.enable_lm must be a boolean"),
    ({"enable_lm": False, "enable_dit": False, "enable_proj": False}, "enables no group"),
    ({"target_modules_lm": ["q_proj", "qkv_proj"]}, "target_modules_lm names ['qkv_proj']"),
])
def test_a_mismatched_config_fails(voxcpm2_tiny: Path, lora: Path, tmp_path: Path, changes: dict[str, Any],
                                   message: str) -> None:
    from export.exporter import export_checkpoint

    bad = copy_of(lora, tmp_path / "bad")
    _edit_config(bad, **changes)
    with pytest.raises(LoraError) as err:
        export_checkpoint(voxcpm2_tiny, tmp_path / "out", lora=bad)
    assert message in str(err.value)


def test_peft_and_pickle_checkpoints_are_refused(voxcpm2_tiny: Path, lora: Path, tmp_path: Path) -> None:
    from export.exporter import export_checkpoint

    peft = copy_of(lora, tmp_path / "peft")
    (peft / "adapter_config.json").write_text("{}")
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    (pickled / CONFIG).write_bytes((lora / CONFIG).read_bytes())
    (pickled / "lora_weights.ckpt").write_bytes(b"\x80\x04K\x01.")
    for bad, message in ((peft, "PEFT adapters (adapter_config.json) are not accepted"),
                         (pickled, "pickle checkpoints (lora_weights.ckpt) are not accepted"),
                         (lora / WEIGHTS, "is a directory holding")):
        with pytest.raises(LoraError) as err:
            export_checkpoint(voxcpm2_tiny, tmp_path / "out", lora=bad)
        assert message in str(err.value)


def test_cli_lora(voxcpm2_tiny: Path, lora: Path, lora_artifacts: Path, tmp_path: Path,
                  monkeypatch: pytest.MonkeyPatch) -> None:
    """`say --checkpoint --lora` exports with the adapter (cached by the adapter's content) and speaks
    as the merged export does; `--lora` with `--artifacts` is refused."""
    import soundfile as sf

    from triton_tts.cli import main

    monkeypatch.setenv("TRITON_TTS_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "a.wav"
    assert main(["say", "--checkpoint", str(voxcpm2_tiny), "--lora", str(lora), TEXT, "-o", str(out),
                 "--seed", "1"]) == 0
    exported = list((tmp_path / "cache" / "artifacts").iterdir())
    assert len(exported) == 1 and exported[0].name.endswith(f"-lora-{identity(lora)['sha256'][:16]}")
    via_artifacts = tmp_path / "b.wav"
    assert main(["say", "--artifacts", str(lora_artifacts), TEXT, "-o", str(via_artifacts), "--seed", "1"]) == 0
    assert np.array_equal(sf.read(out)[0], sf.read(via_artifacts)[0])
    assert main(["say", "--artifacts", str(lora_artifacts), "--lora", str(lora), TEXT, "-o", str(out)]) == 2


def test_assign_lora_picks_the_one_family_that_takes_adapters(voxcpm2_tiny: Path, lora: Path, tmp_path: Path) -> None:
    from export.families import FAMILIES
    from triton_tts.artifacts import assign_lora
    from triton_tts.checkpoints import resolve_checkpoint
    from ttscore.contract.errors import InvalidRequest

    other = next(f for f in FAMILIES.values() if f.lora is None)  # the first registered family takes none
    tiny_checkpoint = other.make_tiny(tmp_path / "other", seed=0, **dict(other.demo[0][1]))
    both = [resolve_checkpoint(tiny_checkpoint), resolve_checkpoint(voxcpm2_tiny)]
    assert assign_lora(both, lora) == [None, lora]
    assert assign_lora(both, None) == [None, None]
    with pytest.raises(InvalidRequest, match="none is"):
        assign_lora(both[:1], lora)
    with pytest.raises(InvalidRequest, match="several are"):
        assign_lora([both[1], both[1]], lora)
    from export.exporter import export_checkpoint

    with pytest.raises(InvalidRequest, match="take no LoRA adapter"):
        export_checkpoint(tiny_checkpoint, Path("/nonexistent-out"), lora=lora)


def test_prepare_with_lora_and_the_gateway_lists_it(voxcpm2_tiny: Path, lora: Path, tmp_path: Path) -> None:
    """`prepare --lora` (compose's init step): the export carries the adapter, and the gateway started
    on the config it writes lists it in GET /v1/models (no Triton: a fake backend)."""
    import sys

    from fastapi.testclient import TestClient

    from gateway.app import create_app
    from gateway.settings import Settings
    from triton_tts.cli import main

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from gateway_fixtures import FakeBackend

    gw = tmp_path / "gateway.json"
    assert main(["prepare", "--checkpoints", str(voxcpm2_tiny), "--artifacts", str(tmp_path / "art"),
                 "--repository", str(tmp_path / "repo"), "--gateway-config", str(gw), "--lora", str(lora),
                 "--quiet"]) == 0
    settings = Settings.from_dict(json.loads(gw.read_text()))
    with TestClient(create_app(settings, backend_factory=lambda s: FakeBackend())) as client:
        cards = client.get("/v1/models").json()["data"]
    want = identity(lora)
    assert [c["adapter"] for c in cards if c["id"] == "VoxCPM2-tiny"] == [
        {k: want[k] for k in ("name", "format", "sha256", "r", "alpha")}]
