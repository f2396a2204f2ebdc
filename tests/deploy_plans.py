"""Deploy plans in the serving tests: a family's plan for exported checkpoints served under given names, as
`triton-tts serve` asks for it (tests/runtime_tests), and a served checkpoint from a hand-written manifest
(`triton-tts serve`'s own planning, tests/export_tests and tests/triton_tests)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ttscore.contract.manifest import Manifest, read_manifest


@dataclass
class Served:
    """One served checkpoint as a family's deploy reads it (triton_tts.serve.Served's fields it uses)."""

    name: str
    artifacts: Path
    manifest: Manifest


def deploy(family: str, artifacts: Path, *names: str) -> Any:
    """`family`'s deploy plan for the export `artifacts` served once under each of `names`."""
    from export.families import FAMILIES

    manifest = read_manifest(artifacts)
    return FAMILIES[family].deploy([Served(name, artifacts, manifest) for name in names])


def served_from_manifest(root: Path, name: str, raw: dict[str, Any]) -> Any:
    """triton_tts.serve's Served for a checkpoint `name` whose artifacts folder under `root` holds only the
    manifest `raw` (format_version 1 added)."""
    from triton_tts import serve

    art = root / name
    art.mkdir()
    raw = {"format_version": 1, **raw}
    (art / "manifest.json").write_text(json.dumps(raw))
    return serve.Served(name, art, art, Manifest.parse(art, raw))


def assert_inline_with_an_encoder_each(family: str, artifacts: Path, encoder: str) -> None:
    """`family` serves `encoder` beside its speech generation as its voice-features model: each checkpoint's
    codec decodes inline and gets its own `encoder`, suffixed with the checkpoint's name when several are served."""
    from ttscore.backend.families import FAMILIES as SERVED

    assert [m.name for m in SERVED[family].models] == [encoder]
    assert SERVED[family].voice_features == encoder
    one = deploy(family, artifacts, "a")
    assert one.vocoder == {"a": "inline"} and one.voice_features == {"a": encoder}
    assert one.models == [(encoder, encoder, {"artifacts_dir": str(artifacts)})]
    two = deploy(family, artifacts, "a", "b")
    assert two.voice_features == {"a": f"{encoder}_a", "b": f"{encoder}_b"}
    assert [m[0] for m in two.models] == [f"{encoder}_a", f"{encoder}_b"]


def assert_inline_only(family: str, artifacts: Path) -> None:
    """`family` serves its speech generation alone: each checkpoint's codec decodes inline, no voice-features
    model, nothing else to render or wait for."""
    from ttscore.backend.families import FAMILIES as SERVED

    assert SERVED[family].models == () and SERVED[family].voice_features is None
    plan = deploy(family, artifacts, "a", "b")
    assert plan.vocoder == {"a": "inline", "b": "inline"} and plan.voice_features == {"a": None, "b": None}
    assert plan.models == [] and plan.readiness == []
