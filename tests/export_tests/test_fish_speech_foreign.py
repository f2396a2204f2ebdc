"""A Fish Speech S2 Pro checkpoint the project did not create (tests/fish_speech_foreign.py: vLLM-Omni 0.30.0's own
config class and module init, dimensions and tokenizer unlike make-tiny's, a Fast AR narrower than the Slow AR so
`fast_project_in` exists, DAC codebook_dim 4 and other rates) passes the strict reader, exports, and matches the
reference offline fed the same noise: codes exactly, audio within AUDIO_TOLERANCE, text-only and cloned."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fish_speech_fixtures import *  # noqa: F403  (fish_foreign, fish_foreign_artifacts)
from fish_speech_fixtures import reference_with_our_noise

pytestmark = pytest.mark.export

AUDIO_TOLERANCE = 1e-4


def test_foreign_reads_unlike_tiny(fish_foreign: Path) -> None:
    from export.families import family_of
    from ttscore.runtime.families.fish_speech.checkpoint import read_checkpoint

    assert family_of(fish_foreign).name == "fish_speech"
    info = read_checkpoint(fish_foreign)
    c = info.config
    assert (c.slow.dim, c.fast.dim, c.slow.n_layer, c.fast.qk_norm, c.project_in) == (48, 40, 3, True, True)
    d = info.codec
    assert (d.encoder_dim, d.encoder_rates, d.codebook_dim, d.quantizer_layers, d.decoder_rates) == (
        8, (4, 4, 4, 8), 4, (2, 1), (8, 4, 4, 4))
    assert d.samples_per_frame == 2048


def test_foreign_export_matches_reference(fish_foreign: Path, fish_foreign_artifacts: Path) -> None:
    from fish_speech_loop import synthesize

    from ttscore.runtime.families.fish_speech.artifacts import FishArtifacts

    art = FishArtifacts(fish_foreign_artifacts)
    n = np.arange(26000)
    clip = (0.3 * np.sin(n * 0.05) * np.cos(n * 0.001)).astype(np.float32)
    reqs = [{"text": "A foreign checkpoint speaks.", "max_new_tokens": 9, "seed": 21},
            {"text": "Cloned, 123.", "max_new_tokens": 7, "seed": 22, "ref_text": "<speaker:1>Reference words."}]
    ref, inputs = reference_with_our_noise(fish_foreign, reqs, clip)
    frames = 0
    for i, r in enumerate(reqs):
        got, ref_codes = synthesize(art, r["text"], max_new_tokens=r["max_new_tokens"], seed=r["seed"],
                                    ref_audio=inputs.get(f"ref_audio_{i}"), ref_text=r.get("ref_text"))
        np.testing.assert_array_equal(np.array(art.prompt.clone(r["text"], r["ref_text"], list(
            ref_codes[:, 0] + 151678))[0] if ref_codes is not None else art.prompt.text_only(r["text"])),
            ref[f"prompt_ids_{i}"])
        if ref_codes is not None:
            np.testing.assert_array_equal(ref_codes, ref[f"ref_codes_{i}"])
        np.testing.assert_array_equal(got.codes, ref[f"codes_{i}"])
        assert got.stopped == bool(ref[f"stopped_{i}"])
        np.testing.assert_allclose(art.decode(got.codes, [2, len(got.codes) - 2] if len(got.codes) > 2 else None),
                                   ref[f"audio_{i}"], atol=AUDIO_TOLERANCE, rtol=0)
        frames += len(got.codes)
    assert frames >= 6
