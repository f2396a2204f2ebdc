"""MOSS-TTS-Nano's runtime over the tiny export under the shared engine, against mlx-audio 0.6.2
(tests/moss_tts_nano_lm_mlx.py in "mlx"): greedy frames equal (repetition penalty 1.2 and 1.0), sampled frames
equal with the request's own uniforms fed to mlx-audio's sampler (the same count used); a request's frames do not
depend on its batch; a text of several chunks is each chunk's generation (fresh prompt, past and repetition
history) with its own vocoder stream and the pause after it; the engine's refusals name the field; `say` clones
from --ref-audio at any rate (resampled to 48 kHz)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from moss_tts_nano_fixtures import *  # noqa: F403  (moss_tiny, moss_artifacts: the store's tiny checkpoint, its export)

from ttscore.contract.errors import InvalidRequest
from ttscore.contract.moss_tts_nano import rules
from ttscore.runtime.engine import Generator
from ttscore.runtime.families.moss_tts_nano import text as chunking
from ttscore.runtime.families.moss_tts_nano.request import MossRequest

pytestmark = pytest.mark.parity

TEXT = "Hello there, this is a test."
FRAMES = 12
SPF = 3840


@pytest.fixture(scope="module")
def model(moss_artifacts: Path) -> Any:
    from ttscore.runtime.families import load_model

    return load_model(moss_artifacts, encoders=True)


@pytest.fixture(scope="module")
def codes(model: Any) -> np.ndarray:
    t = np.arange(int(48000 * 0.6)) / 48000
    return model.encode((0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32))


def run(model: Any, *requests: MossRequest, overlap: bool = False) -> list[list[Any]]:
    gen = Generator(model, max_batch=len(requests), chunk_policy="fixed", overlap_vocoder=overlap)
    for i, r in enumerate(requests):
        gen.submit(str(i), r)
    events: dict[str, list[Any]] = {str(i): [] for i in range(len(requests))}
    while gen.num_active:
        for e in gen.step():
            events[e.req_id].append(e)
    return [events[str(i)] for i in range(len(requests))]


def frames_of(events: list[Any]) -> np.ndarray:
    return np.concatenate([e.codes for e in events]).astype(np.int64).reshape(-1, 16)


def pcm_of(events: list[Any]) -> np.ndarray:
    return np.concatenate([e.pcm for e in events])


def mlx(checkpoint: Path, rows: np.ndarray, uniforms: np.ndarray | None = None, **args: Any) -> dict[str, np.ndarray]:
    import refenv

    inputs = {"rows": rows} if uniforms is None else {"rows": rows, "uniforms": uniforms}
    return refenv.run("mlx", Path(__file__).parents[1] / "moss_tts_nano_lm_mlx.py", inputs,
                      ["generate", str(checkpoint), json.dumps(args)])


@pytest.mark.parametrize("penalty", [1.2, 1.0])
def test_greedy_frames_equal_mlx_audio(model: Any, codes: np.ndarray, moss_tiny: Path,
                                       penalty: float) -> None:
    (events,) = run(model, MossRequest(text=TEXT, ref_audio_tokens=codes, max_new_tokens=FRAMES, do_sample=False,
                                       audio_repetition_penalty=penalty))
    ours = frames_of(events)
    theirs = mlx(moss_tiny, model.prompt_rows(TEXT, codes), do_sample=False, max_frames=FRAMES,
                 audio_repetition_penalty=penalty)["frames"]
    assert len(ours) >= 2 and np.array_equal(ours, theirs)
    assert events[-1].final and events[-1].finish_reason == ("stop" if len(ours) < FRAMES else "length")
    assert len(pcm_of(events)) == len(ours) * SPF


@pytest.mark.parametrize("knobs", [{}, {"audio_top_k": 5, "audio_top_p": 0.8, "audio_temperature": 1.3,
                                        "text_temperature": 0.7}])
def test_sampled_frames_equal_mlx_audio_with_the_same_uniforms(model: Any, codes: np.ndarray, moss_tiny: Path,
                                                               knobs: dict[str, Any]) -> None:
    seed = 7
    (events,) = run(model, MossRequest(text=TEXT, ref_audio_tokens=codes, max_new_tokens=FRAMES, seed=seed, **knobs))
    ours = frames_of(events)
    uniforms = np.random.Generator(np.random.PCG64(seed)).random(17 * FRAMES + 1)
    args = {k: v for k, v in {**rules.KNOB_DEFAULTS, **knobs}.items() if k != "do_sample"}
    theirs = mlx(moss_tiny, model.prompt_rows(TEXT, codes), uniforms, do_sample=True, max_frames=FRAMES, **args)
    assert len(ours) >= 1 and np.array_equal(ours, theirs["frames"])
    stopped = len(ours) < FRAMES
    assert int(theirs["used"]) == 17 * len(ours) + int(stopped)  # the decision's uniform, then the 16 codes'
    again = frames_of(run(model, MossRequest(text=TEXT, ref_audio_tokens=codes, max_new_tokens=FRAMES, seed=seed + 1,
                                             **knobs))[0])
    assert again.shape != ours.shape or not np.array_equal(again, ours)  # the seed matters


def test_a_request_does_not_depend_on_its_batch(model: Any, codes: np.ndarray) -> None:
    a = MossRequest(text=TEXT, ref_audio_tokens=codes, max_new_tokens=FRAMES, seed=3)
    b = MossRequest(text="Another, longer sentence to speak right now.", ref_audio_tokens=codes[:5],
                    max_new_tokens=FRAMES, seed=4)
    alone = [run(model, r)[0] for r in (a, b)]
    together = run(model, a, b)
    for x, y in zip(alone, together, strict=True):
        assert np.array_equal(frames_of(x), frames_of(y))
        np.testing.assert_allclose(pcm_of(x), pcm_of(y), atol=1e-5)


def test_vocoding_beside_the_model_step_gives_the_same_chunks(model: Any, codes: np.ndarray) -> None:
    """vocoder_overlap: the codec decodes streams' later chunks on a second thread while the LM steps (its window
    state in the arena, touched only by the thread decoding it): the same frames, chunks and audio bit for bit."""
    reqs = (MossRequest(text=TEXT, ref_audio_tokens=codes, max_new_tokens=FRAMES, seed=3, chunk_frames=3),
            MossRequest(text="Another, longer sentence to speak right now.", ref_audio_tokens=codes[:5],
                        max_new_tokens=FRAMES, seed=4, chunk_frames=2))
    assert model.overlap_vocoder  # so the served default ("auto") overlaps this family
    for plain, beside in zip(run(model, *reqs), run(model, *reqs, overlap=True), strict=True):
        assert [e.frames for e in plain] == [e.frames for e in beside]
        assert np.array_equal(frames_of(plain), frames_of(beside))
        assert np.array_equal(pcm_of(plain), pcm_of(beside))


def test_a_voice_prefix_is_computed_once_and_gives_what_it_computes(model: Any, codes: np.ndarray) -> None:
    """The prompt rows before the text (template, reference rows, header) are prefilled alone and kept by digest:
    the same voice's next request (another text) reuses them, and its frames and audio equal those it gets with the
    cache emptied first; another reference is another prefix."""
    a = MossRequest(text=TEXT, ref_audio_tokens=codes, max_new_tokens=FRAMES, seed=3)
    b = MossRequest(text="Another sentence for the same voice.", ref_audio_tokens=codes, max_new_tokens=FRAMES,
                    seed=5)
    model.prefixes.clear()
    hits, misses = model.prefix_hits, model.prefix_misses
    (first_a,) = run(model, a)
    (warm_b,) = run(model, b)
    assert (model.prefix_misses - misses, model.prefix_hits - hits) == (1, 1)
    model.prefixes.clear()
    (cold_b,) = run(model, b)
    assert model.prefix_misses - misses == 2
    assert np.array_equal(frames_of(warm_b), frames_of(cold_b))
    assert np.array_equal(pcm_of(warm_b), pcm_of(cold_b))
    run(model, MossRequest(text=TEXT, ref_audio_tokens=codes[:5], max_new_tokens=2, seed=3))
    assert model.prefix_misses - misses == 3 and len(model.prefixes) == 2
    assert len(first_a) > 0


def test_long_text_is_each_chunk_with_its_own_stream_and_pause(model: Any, codes: np.ndarray) -> None:
    text = "One two three. " + "This sentence has quite a few more words in it, so it is long. " * 4
    chunks = chunking.text_chunks(text, model.tokenizer.count)
    assert len(chunks) >= 2
    (events,) = run(model, MossRequest(text=text, ref_audio_tokens=codes, max_new_tokens=4, do_sample=False))
    pcm, frames = pcm_of(events), frames_of(events)
    want_pcm, want_frames, at = [], [], 0
    for i, chunk in enumerate(chunks):  # each chunk alone: its own prompt, past, history and vocoder stream
        (alone,) = run(model, MossRequest(text=chunk, ref_audio_tokens=codes, max_new_tokens=4, do_sample=False))
        want_frames.append(frames_of(alone))
        want_pcm.append(pcm_of(alone))
        if i + 1 < len(chunks):
            want_pcm.append(np.zeros(chunking.pause_samples(chunk, 48000), np.float32))
        at += len(frames_of(alone))
    assert np.array_equal(frames, np.concatenate(want_frames))
    want = np.concatenate(want_pcm)
    assert pcm.shape == want.shape and frames.shape[0] == at
    np.testing.assert_allclose(pcm, want, atol=1e-5)


def test_refusals_name_the_field(model: Any, codes: np.ndarray) -> None:
    for request, param in (
        (MossRequest(text="Hi."), "ref_audio"),
        (MossRequest(text="  ", ref_audio_tokens=codes), "input"),
        (MossRequest(text="Hi.", ref_audio_tokens=codes[:, :15]), "ref_audio_tokens"),
        (MossRequest(text="Hi.", ref_audio_tokens=codes + 1000), "ref_audio_tokens"),
        (MossRequest(text="Hi.", ref_audio_tokens=codes, audio_top_p=0.0), "extra_params"),
        (MossRequest(text="Hi.", ref_audio_tokens=codes, max_new_tokens=5000), "max_new_tokens"),
        (MossRequest(text="Hi.", ref_audio=np.zeros(100, np.float32)), "ref_audio"),
    ):
        with pytest.raises(InvalidRequest) as info:
            model.admit(request)
        assert info.value.param == param, request


def test_say_clones_from_a_reference_file(moss_artifacts: Path, tmp_path: Path) -> None:
    import soundfile as sf

    from ttscore.runtime.families.moss_tts_nano.offline import OFFLINE
    from ttscore.runtime.family import SayOptions

    t = np.arange(int(16000 * 0.8)) / 16000
    sf.write(tmp_path / "ref.wav", (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 16000, subtype="FLOAT")
    job = OFFLINE.say(moss_artifacts, SayOptions(text=TEXT, ref_audio=str(tmp_path / "ref.wav"), ref_text="ignored",
                                                 greedy=True, max_new_tokens=FRAMES))
    assert job.sample_rate == 48000 and job.request.do_sample is False and job.request.ref_audio.size == 38400
    (events,) = run(job.model, job.request)
    assert frames_of(events).shape[0] >= 1
    for options, param in ((SayOptions(text=TEXT), "ref_audio"), (SayOptions(text=TEXT, voice="vivian"), "voice"),
                           (SayOptions(text=TEXT, ref_audio=str(tmp_path / "ref.wav"), language="en"), "language")):
        with pytest.raises(InvalidRequest) as info:
            OFFLINE.say(moss_artifacts, options)
        assert info.value.param == param


def test_reference_encoded_in_chunks_equals_one_call(model: Any) -> None:
    """encode_reference feeds moss_codec_encoder ENCODE_CHUNK_FRAMES frames a call (state and position carried):
    on a clip spanning several chunks and ending in a partial frame, at any chunking, the codes equal one call."""
    from ttscore.runtime.families.moss_tts_nano.model import (
        ENCODE_CHUNK_FRAMES,
        encode_reference,
        encoder_state_size,
    )

    frames = 3 * ENCODE_CHUNK_FRAMES + 4
    rng = np.random.default_rng(5)
    t = np.arange(frames * SPF + SPF // 3) / 48000
    clip = (0.3 * np.sin(2 * np.pi * 180 * t) + 0.05 * rng.standard_normal(len(t))).astype(np.float32)
    size = encoder_state_size(model.manifest)
    whole = encode_reference(model.encoder, size, clip, 48000, chunk_frames=frames)
    assert whole.shape == (frames, 16)
    np.testing.assert_array_equal(model.encode(clip), whole)  # the default chunking
    for chunk in (1, 7, ENCODE_CHUNK_FRAMES - 1):
        np.testing.assert_array_equal(encode_reference(model.encoder, size, clip, 48000, chunk_frames=chunk), whole)
    # the state carried matters: chunks from a zero state each would not give the same codes
    restarts = np.concatenate([encode_reference(model.encoder, size, clip[i * 7 * SPF: (i + 1) * 7 * SPF], 48000)
                               for i in range(frames // 7)])
    assert not np.array_equal(restarts, whole[: len(restarts)])
