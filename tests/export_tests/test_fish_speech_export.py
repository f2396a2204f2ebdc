"""Fish Speech S2 Pro's export of the tiny checkpoint: the manifest (family, the four graphs with their validation
against the torch modules, the exact streaming decoder's state), the tables; not served yet."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fish_speech_fixtures import *  # noqa: F403  (fish_tiny, fish_artifacts)

from ttscore.contract import fish_speech as spec
from ttscore.contract.errors import CheckpointError

pytestmark = pytest.mark.export


def test_manifest(fish_artifacts: Path) -> None:
    from ttscore.contract.manifest import read_manifest

    m = read_manifest(fish_artifacts)
    raw = json.loads((fish_artifacts / "manifest.json").read_text())
    assert raw["family"] == spec.FAMILY and m.sample_rate == 44100 and m.samples_per_frame == 2048
    assert set(raw["graphs"]) == set(spec.GRAPH_NAMES)
    for name, g in raw["graphs"].items():
        report = g["validation"]
        for what, err in report["max_abs_error"].items():
            assert err <= report["tolerance"][what], (name, what)
    assert raw["graphs"]["dac_encode"]["validation"]["max_abs_error"]["codes"] == 0.0
    layout = raw["vocoder"]["state_layout"]
    assert layout[0] == ["frames", [1]] and ["post.0.k", [1, 127, 64]] in layout
    assert (m.vocoder_state_size or 0) > 127 * 64
    for table in (spec.EMBEDDINGS, spec.CODEBOOK_EMBEDDINGS, spec.FAST_EMBEDDINGS):
        assert (fish_artifacts / f"{table}.npy").is_file()
    assert (fish_artifacts / "tokenizer" / "tokenizer.json").is_file()


def test_not_served_yet() -> None:
    from export.families import FAMILIES

    with pytest.raises(CheckpointError, match="not served yet"):
        FAMILIES[spec.FAMILY].deploy([])
