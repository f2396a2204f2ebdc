"""A CosyVoice3 checkpoint the project did not create (tests/cosyvoice3_foreign.py: vLLM-Omni's own flow and
HiFT modules and transformers' Qwen2ForCausalLM with their own init, other dimensions, a word-level
tokenizer, hift.pt under `generator.`) reads strictly, exports, and matches the reference: tokens exactly,
mel and audio within the stated tolerances, offline and streamed."""

from __future__ import annotations

from pathlib import Path

import pytest
from cosyvoice3_fixtures import *  # noqa: F403  (cosyvoice3_foreign, cosyvoice3_foreign_artifacts)
from test_cosyvoice3_parity import check_parity

pytestmark = pytest.mark.unit


def test_foreign_checkpoint_reads_strictly(cosyvoice3_foreign: Path) -> None:
    from export.families import family_of
    from ttscore.runtime.families.cosyvoice3.checkpoint import read_checkpoint

    info = read_checkpoint(cosyvoice3_foreign)
    assert family_of(cosyvoice3_foreign).name == "cosyvoice3"
    assert (info.lm.hidden, info.lm.layers, info.lm.speech_token_size, info.flow.dim, info.hift.base_channels) == (
        96, 3, 1000, 96, 48)
    assert info.hift.upsample_rates == (6, 5, 4) and info.hift.samples_per_frame == 480


def test_foreign_matches_the_reference(cosyvoice3_foreign: Path, cosyvoice3_foreign_artifacts: Path) -> None:
    """transformers' Qwen2 init gives nearly flat logits (the merged stop id leads): no stop before 55."""
    check_parity(cosyvoice3_foreign, cosyvoice3_foreign_artifacts, seeds=(3,), min_len=55)
