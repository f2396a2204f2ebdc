"""A Gepard-1.0 checkpoint the project did not create (tests/gepard_foreign.py: transformers 5.14.1's
own config class and init, other dimensions, sidecar values and tokenizer class, float32, a [1]-shaped
audio_embed_scale, ignored cloning/MTP tensors) with a NanoCodec of another shape (torch's default
init, written in NeMo's archive layout here) exports, and our runtime makes exactly the reference's
frames with its noise fed; the streamed audio equals the whole decode."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gepard_fixtures import *  # noqa: F403  (gepard_foreign, gepard_foreign_artifacts)
from gepard_fixtures import FOREIGN_CODEC_FILE, reference, reference_with_our_noise
from sequences import run_to_the_end

pytestmark = [pytest.mark.parity, pytest.mark.slow]

CASES = (("Hello there, this is another voice.", 4, 14), ("Sunny", 9, 10))


@pytest.fixture(scope="module")
def model(gepard_foreign_artifacts: Path) -> Any:
    from ttscore.runtime.families import load_model

    return load_model(gepard_foreign_artifacts)


def test_foreign_checkpoint_matches_the_reference(gepard_foreign: Path, model: Any) -> None:
    from ttscore.runtime.families.gepard.request import GepardRequest

    assert model.info.backbone.hidden_size == 48 and model.info.num_speaker_slots == 4
    assert model.info.temperature == 0.5 and model.info.stop_threshold == 0.4
    want = reference(gepard_foreign, "generate", {}, json.dumps([{"text": t, "seed": s, "max_new_tokens": n}
                                                           for t, s, n in CASES]))
    seqs = []
    for i, (text, seed, n) in enumerate(CASES):
        seq = model.admit(GepardRequest(text=text, seed=seed, max_new_tokens=n))
        np.testing.assert_array_equal(seq.ids, want[f"prompt_ids_{i}"])
        it = iter(zip(want[f"noise_heads_{i}"], want[f"noise0_{i}"], strict=True))
        seq.noise = lambda it=it: next(it)
        seqs.append(seq)
    for i, got in enumerate(run_to_the_end(model, seqs, 32)):
        assert got.shape[0] > 1
        np.testing.assert_array_equal(got, want[f"codes_{i}"])
    # "Sunny" is short: its text block is repeated (target 10, below 7, at most 4 copies)
    assert list(want["prompt_ids_1"]).count(model.info.start_of_text) > 1


def test_the_reference_fed_our_seeded_noise_makes_our_frames(gepard_foreign: Path, model: Any) -> None:
    """The other way round (what the API tests rely on): the noise our runtime draws for a seed, fed to
    the reference, gives the frames our runtime makes for that seed on its own."""
    from ttscore.runtime.families.gepard.request import GepardRequest

    cases = [{"text": t, "seed": s + 100, "max_new_tokens": n} for t, s, n in CASES]
    want = reference_with_our_noise(gepard_foreign, model, cases)
    seqs = [model.admit(GepardRequest(text=c["text"], seed=c["seed"], max_new_tokens=c["max_new_tokens"]))
            for c in cases]
    for i, got in enumerate(run_to_the_end(model, seqs, 32)):
        assert got.shape[0] > 1
        np.testing.assert_array_equal(got, want[f"codes_{i}"])
    # the reference took our noise, not its own generator's
    drawn = reference(gepard_foreign, "generate", {}, json.dumps(cases))
    assert not np.array_equal(drawn["noise_heads_0"], want["noise_heads_0"])


def test_foreign_codec_streams_exactly(gepard_foreign: Path, model: Any) -> None:
    import torch

    from export.gepard.codec import load_codec

    codes = np.random.default_rng(3).integers(0, np.array([8, 7, 6, 6] * 8), size=(7, 32)).astype(np.int64)
    stream = model.vocoder.new_stream()
    pcm = np.concatenate([model.vocoder.decode([(stream, codes[a:b])])[0] for a, b in ((0, 2), (2, 3), (3, 7))])
    with torch.inference_mode():
        want = load_codec(gepard_foreign / FOREIGN_CODEC_FILE)(torch.from_numpy(codes.T[None].copy()))[0].numpy()
    assert pcm.shape == want.shape == (7 * 1024,) and np.abs(want).max() > 1e-3
    np.testing.assert_allclose(pcm, want, atol=1e-4)
