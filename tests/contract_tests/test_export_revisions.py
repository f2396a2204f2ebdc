"""An export's format (the manifest's `export_revision`) is defined once, in each family's contract: the exporter
writes it, the runtime reads only that one, and an export of another revision is refused when it is loaded (the
Triton model then fails to load: the deployment answers 503 "not ready", not a 500 per request)."""

from __future__ import annotations

import json

import pytest

from ttscore.contract.errors import ArtifactError

pytestmark = pytest.mark.unit


def test_every_family_exports_the_revision_its_runtime_reads():
    from export.families import FAMILIES as EXPORTED
    from ttscore.runtime.families import FAMILIES as RUNTIME

    assert set(EXPORTED) == set(RUNTIME)
    assert {n: EXPORTED[n].revision for n in EXPORTED} == {n: getattr(RUNTIME[n], "export_revision", 1) for n in RUNTIME}
    assert any(f.revision > 1 for f in EXPORTED.values())  # (the check compares something)


@pytest.mark.parametrize("family", ["cosyvoice3", "moss_tts_nano", "voxcpm2", "qwen3_tts"])
def test_an_export_of_another_revision_is_refused_at_load_naming_what_to_do(tmp_path, family):
    from ttscore.runtime.families import FAMILIES, load_model

    reads = getattr(FAMILIES[family], "export_revision", 1)
    (tmp_path / "manifest.json").write_text(json.dumps({"format_version": 1, "family": family, "variant": "base",
                                                        "export_revision": reads + 1}))
    with pytest.raises(ArtifactError, match=f"export revision {reads + 1}, this runtime reads revision {reads}: re-export"):
        load_model(tmp_path)
