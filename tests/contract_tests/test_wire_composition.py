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


def test_an_external_family_package_joins_the_wire_table_and_the_triton_registry(tmp_path):
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
    probe = textwrap.dedent("""
        import json
        from ttscore.backend import families
        from ttscore.contract import tensors
        print(json.dumps({
            "inputs": {t.name: list(t.families) for t in tensors.SPEECH_INPUTS},
            "public": sorted(tensors.PUBLIC_MODELS),
            "backend": sorted(families.FAMILIES),
            "owner": families.family_of_model("demo_encoder").name,
        }))
    """)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "TTS_FAMILY_PACKAGES": "tts_family_demo"}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    got = json.loads(out.stdout)
    assert got["inputs"]["pitch"] == ["demo"] and "demo" in got["inputs"]["text"] and "demo" in got["inputs"]["seed"]
    assert "demo_encoder" in got["public"] and "demo" in got["backend"] and got["owner"] == "demo"
