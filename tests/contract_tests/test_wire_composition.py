"""The wire table and the Triton registry are composed from what each family declares (issue 18):
tensors.py and the backend registry name no family, and a family package outside the project joins
both through ttscore.contract.plugins alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from ttscore.contract import tensors as triton_io
from ttscore.contract.wire import FamilyWire, TensorIO

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def test_rows_declared_by_several_families_merge_and_name_them():
    a = FamilyWire("a", (TensorIO("text", "BYTES", (1,), doc="A's."), TensorIO("x", "INT32", (1,), True)))
    b = FamilyWire("b", (TensorIO("text", "BYTES", (1,), doc="B's."), TensorIO("y", "FP32", (-1,), True)))
    rows = {t.name: t for t in triton_io.compose_speech_inputs((a, b))}
    assert list(rows) == ["text", "x", "y"]
    assert rows["text"].families == ("a", "b") and rows["text"].doc == "A's. / B's."
    assert rows["x"].families == ("a",) and rows["y"].families == ("b",)


def test_families_must_agree_on_a_shared_input():
    a = FamilyWire("a", (TensorIO("seed", "INT64", (1,), True),))
    b = FamilyWire("b", (TensorIO("seed", "INT32", (1,), True),))
    with pytest.raises(ValueError, match="seed"):
        triton_io.compose_speech_inputs((a, b))


def demo_package(tmp_path: Path) -> dict[str, str]:
    """A family package `tts_family_demo` (family "demo") in tmp_path, with an input of its own
    ("pitch") and a Triton model of its own; returns the environment that names it."""
    pkg = tmp_path / "tts_family_demo"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "contract.py").write_text(textwrap.dedent("""
        from ttscore.contract import wire
        from ttscore.contract.rules import FamilyRules, FieldRule

        FAMILY = FamilyRules(family="demo", tasks=("Base",), fields=(FieldRule("seed", 0, 10, None),))
        WIRE = wire.FamilyWire("demo", (wire.TEXT, wire.SEED, wire.TensorIO("pitch", "FP32", (1,), True)),
                               {"demo_encoder": ((wire.TensorIO("audio", "FP32", (-1,)),), ())})
    """))
    (pkg / "backend.py").write_text(textwrap.dedent("""
        from ttscore.backend.family import BackendFamily, TritonModel

        FAMILY = BackendFamily("demo", (TritonModel("demo_encoder"),), voice_features="demo_encoder")
    """))
    return {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "TTS_FAMILY_PACKAGES": "tts_family_demo"}


def probe(script: str, env: dict[str, str], *flags: str) -> dict:
    out = subprocess.run([sys.executable, *flags, "-c", textwrap.dedent(script)], env=env, cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_an_external_family_package_joins_the_wire_table_and_the_triton_registry(tmp_path):
    got = probe("""
        import json
        from ttscore.backend import families
        from ttscore.contract import tensors
        print(json.dumps({
            "inputs": {t.name: list(t.families) for t in tensors.SPEECH_INPUTS},
            "public": sorted(tensors.PUBLIC_MODELS),
            "backend": sorted(families.FAMILIES),
            "owner": families.family_of_model("demo_encoder").name,
        }))
    """, demo_package(tmp_path))
    assert got["inputs"]["pitch"] == ["demo"] and "demo" in got["inputs"]["text"] and "demo" in got["inputs"]["seed"]
    assert "demo_encoder" in got["public"] and "demo" in got["backend"] and got["owner"] == "demo"


def test_a_family_package_on_pythonpath_is_found_where_pythonpath_is_ignored(tmp_path):
    """A Triton python stub inherits the environment, but its embedded interpreter leaves PYTHONPATH
    off the import path (like `python -E`): plugins looks there for the packages it is told of."""
    got = probe("""
        import json, sys
        from ttscore.contract import plugins
        print(json.dumps([m.__name__ for m in plugins.layer_modules("contract")]))
    """, demo_package(tmp_path), "-E")
    assert got == ["tts_family_demo.contract"]


def test_the_renderer_adds_an_external_familys_own_inputs_to_speech_generation(tmp_path):
    """The committed speech_generation config lists the project's families' inputs; a family
    package cannot edit it, so its own inputs come from the contract table when rendering."""
    got = probe(f"""
        import json
        from ttscore.backend.repository import load_config, render_repository
        repo = render_repository({str(tmp_path / "repo")!r}, models=["speech_generation"])
        config = load_config(repo / "speech_generation" / "config.pbtxt")
        print(json.dumps({{t.name: [t.data_type, list(t.dims), t.optional] for t in config.input}}))
    """, demo_package(tmp_path))
    assert got["pitch"] == [11, [1], True]  # TYPE_FP32
    assert "text" in got and "ref_patches" in got


def test_a_family_name_claimed_twice_is_refused():
    from ttscore.contract import plugins

    first, other, again = SimpleNamespace(name="demo"), SimpleNamespace(name="other"), SimpleNamespace(name="demo")
    assert plugins.registry([first, other], lambda p: p.name, "part") == {"demo": first, "other": other}
    with pytest.raises(ValueError, match="part 'demo' is registered twice"):
        plugins.registry([first, other, again], lambda p: p.name, "part")


def test_an_external_package_cannot_replace_a_built_in_family(tmp_path):
    """A package whose contract family takes a built-in family's name stops the registry at import."""
    env = demo_package(tmp_path)
    contract = tmp_path / "tts_family_demo" / "contract.py"
    contract.write_text(contract.read_text().replace('"demo"', '"qwen3_tts"'))
    out = subprocess.run([sys.executable, "-c", "import ttscore.contract.families"], env=env, cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode != 0 and "contract family 'qwen3_tts' is registered twice" in out.stderr, out.stderr
