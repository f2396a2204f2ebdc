"""Gepard-1.0 offline parity: the exported graphs under our runtime make exactly the reference's frames
(transformers 5.14.1's Qwen3_5TextModel + vLLM-Omni 0.30.0's talker sampling, tests/gepard_reference.py
in ref5) when each sampling step gets the Gumbel noise the reference drew from its seeded generator:
alone and batched, through the stop head and the frame budget. The runtime's own seeded noise makes a
request's frames independent of its batch. The audio the engine streams (chunks of 1 then 3 frames
through codec_stream) equals the whole NanoCodec decode of the reference frames within AUDIO_ATOL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gepard_fixtures import *  # noqa: F403  (gepard_tiny, gepard_artifacts)
from gepard_fixtures import reference
from sequences import run_to_the_end

pytestmark = [pytest.mark.parity, pytest.mark.slow]

AUDIO_ATOL = 1e-4  # streamed exported codec_stream vs the torch whole decode (measured ~4e-6 tiny)
CASES = (  # (text, seed, max_new_tokens): the stop head fires in the first; the others run to the budget
    ("Hello, this is Gepard speaking.", 1, 24),
    ("Hi", 0, 24),  # short: the text block repeats (text_repetition)
    ("Good morning, how are you today?", 2, 16),
)


@pytest.fixture(scope="module")
def model(gepard_artifacts: Path) -> Any:
    from ttscore.runtime.families import load_model

    return load_model(gepard_artifacts)


@pytest.fixture(scope="module")
def ref(gepard_tiny: Path) -> list[dict[str, np.ndarray]]:
    reqs = [{"text": t, "seed": s, "max_new_tokens": n} for t, s, n in CASES]
    got = reference(gepard_tiny, "generate", {}, json.dumps(reqs))
    keys = ("prompt_ids", "codes", "noise_heads", "noise0", "stopped")
    return [{k: got[f"{k}_{i}"] for k in keys} for i in range(len(CASES))]


def _request(i: int) -> Any:
    from ttscore.runtime.families.gepard.request import GepardRequest

    text, seed, n = CASES[i]
    return GepardRequest(text=text, seed=seed, max_new_tokens=n)


def fed(r: dict[str, np.ndarray]) -> Any:
    """A noise source that replays the reference's draws (and fails past them)."""
    it = iter(zip(r["noise_heads"], r["noise0"], strict=True))
    return lambda: next(it)


def test_the_cases_cover_stop_and_budget(ref: list[dict[str, np.ndarray]]) -> None:
    assert [bool(r["stopped"]) for r in ref] == [True, False, False]
    assert [r["codes"].shape[0] for r in ref][1:] == [24, 16]


@pytest.mark.parametrize("i", range(len(CASES)))
def test_frames_equal_the_reference_with_its_noise(i: int, model: Any, ref: list[dict[str, np.ndarray]]) -> None:
    seq = model.admit(_request(i))
    np.testing.assert_array_equal(seq.ids, ref[i]["prompt_ids"])
    seq.noise = fed(ref[i])
    (got,) = run_to_the_end(model, [seq], 32)
    want = ref[i]["codes"]
    assert got.shape == want.shape and got.shape[0] > 1
    np.testing.assert_array_equal(got, want)
    assert len({tuple(f) for f in got}) > 1  # not one frame repeated
    assert seq.finished == ("stop" if ref[i]["stopped"] else "length")


def test_batched_requests_equal_the_reference(model: Any, ref: list[dict[str, np.ndarray]]) -> None:
    """The three requests in one batch (ragged prompts and pasts; one stops early)."""
    seqs = [model.admit(_request(i)) for i in range(len(CASES))]
    for s, r in zip(seqs, ref, strict=True):
        s.noise = fed(r)
    for got, r in zip(run_to_the_end(model, seqs, 32), ref, strict=True):
        np.testing.assert_array_equal(got, r["codes"])


def test_a_seeded_request_makes_the_same_frames_in_any_batch(model: Any) -> None:
    alone = run_to_the_end(model, [model.admit(_request(1))], 32)[0]
    batched = run_to_the_end(model, [model.admit(_request(i)) for i in (0, 1, 2)], 32)[1]
    np.testing.assert_array_equal(alone, batched)
    from ttscore.runtime.families.gepard.request import GepardRequest

    other = run_to_the_end(model, [model.admit(GepardRequest(text=CASES[1][0], seed=5, max_new_tokens=24))], 32)[0]
    assert not (other.shape == alone.shape and (other == alone).all())  # the seed reaches the sampler


def test_streamed_audio_equals_the_whole_decode_of_the_reference_frames(
        gepard_tiny: Path, model: Any, ref: list[dict[str, np.ndarray]]) -> None:
    import torch

    from export.gepard.codec import load_codec
    from ttscore.runtime.engine import Generator

    admit = model.admit

    def admit_fed(request: Any) -> Any:
        seq = admit(request)
        seq.noise = fed(ref[1])
        return seq

    req = _request(1)
    req.initial_chunk_frames, req.chunk_frames = 1, 3
    model.admit = admit_fed
    try:
        events = list(Generator(model, max_batch=1, chunk_policy="fixed").synthesize(req))
    finally:
        del model.admit
    pcm = np.concatenate([ev.pcm for ev in events])
    codec = load_codec(gepard_tiny / "nanocodec/nemo-nano-codec-22khz-1.89kbps-21.5fps.nemo")
    with torch.inference_mode():
        want = codec(torch.from_numpy(ref[1]["codes"].T[None].copy()))[0].numpy()
    assert len(events) > 2 and pcm.shape == want.shape == (24 * 1024,)
    assert np.abs(want).max() > 0.05
    np.testing.assert_allclose(pcm, want, atol=AUDIO_ATOL)


def test_say_writes_the_seeded_audio(gepard_artifacts: Path, tmp_path: Path) -> None:
    import soundfile as sf

    from triton_tts.cli import main

    outs = []
    for name in ("a", "b"):
        path = tmp_path / f"{name}.wav"
        assert main(["say", "--artifacts", str(gepard_artifacts), "-o", str(path), "--seed", "3",
                     "--max-new-tokens", "12", CASES[0][0]]) == 0
        audio, sr = sf.read(str(path), dtype="float32")
        assert sr == 22050 and audio.shape[0] % 1024 == 0 and audio.shape[0] > 0
        outs.append(audio)
    np.testing.assert_array_equal(outs[0], outs[1])
    assert main(["say", "--artifacts", str(gepard_artifacts), "-o", str(tmp_path / "c.wav"), "--voice", "alice",
                 CASES[0][0]]) == 2
