"""OmniVoice parity: the exported graphs + the numpy unmasking loop against the reference's own
`_generate_iterative` (omnivoice==0.2.1) on the tiny checkpoint, every source of randomness fed
identically. Codes must be equal; audio is compared with the reference codec decoder (transformers'
DacModel route) within AUDIO_RTOL of its peak."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from omnivoice_fixtures import *  # noqa: F403  (its session fixtures: omnivoice_tiny, omnivoice_artifacts)

from ttscore.runtime.engine import Generator
from ttscore.runtime.families import load_model
from ttscore.runtime.families.omnivoice.request import OmniVoiceRequest

pytestmark = [pytest.mark.export, pytest.mark.parity, pytest.mark.slow]

AUDIO_RTOL = 1e-4  # max |ours - reference| / max |reference| (measured ~2e-6 on the tiny checkpoint)
NUM_STEP = 8


@pytest.fixture(scope="module")
def reference(omnivoice_tiny: Path) -> Any:
    from export.omnivoice.reference import load_reference

    return load_reference(omnivoice_tiny)


@pytest.fixture(scope="module")
def ours(omnivoice_artifacts: Path) -> Any:
    return load_model(omnivoice_artifacts)


def _reference_codes(model: Any, texts: list[str], instructs: list[str | None], cfg: dict[str, Any],
                     uniforms: np.random.Generator | None = None) -> list[np.ndarray]:
    import torch

    from export.omnivoice.reference import omnivoice_module

    mod = omnivoice_module()
    config = mod.OmniVoiceGenerationConfig(num_step=NUM_STEP, postprocess_output=False, **cfg)
    task = model._preprocess_all(text=texts, instruct=instructs)
    original = mod._gumbel_sample

    def fed(logits: torch.Tensor, temperature: float) -> torch.Tensor:
        assert uniforms is not None, "the reference drew noise where the test fed none"
        u = torch.from_numpy(uniforms.random(tuple(logits.shape), dtype=np.float32))
        return logits / temperature + (-torch.log(-torch.log(u + 1e-10) + 1e-10))

    mod._gumbel_sample = fed
    try:
        with torch.no_grad():
            out = model._generate_iterative(task, config)
    finally:
        mod._gumbel_sample = original
    return [o.numpy() for o in out]


def _our_codes(model: Any, requests: list[OmniVoiceRequest], stagger: int = 0) -> list[np.ndarray]:
    """All requests through one engine (the second joining `stagger` steps after the first)."""
    gen = Generator(model, max_batch=4)
    done: dict[str, np.ndarray] = {}
    waiting = list(enumerate(requests))
    steps = 0
    while waiting or gen.num_active:
        if waiting and (steps >= stagger * waiting[0][0]):
            i, req = waiting.pop(0)
            gen.submit(str(i), req)
            continue
        for ev in gen.step():
            if ev.final:
                assert ev.codes is not None
                done[ev.req_id] = ev.codes.T.copy()
        steps += 1
    return [done[str(i)] for i in range(len(requests))]


KNOBS = {"num_step": NUM_STEP, "position_temperature": 0.0, "class_temperature": 0.0}


def test_deterministic_codes_equal_the_reference_auto_voice_and_voice_design(reference: Any, ours: Any) -> None:
    texts = ["Hello world, nice to meet you.", "The quick brown fox jumps over the lazy dog."]
    instructs = [None, "female, low pitch, british accent"]
    want = _reference_codes(reference, texts, instructs, {"position_temperature": 0.0, "class_temperature": 0.0})
    got = _our_codes(ours, [OmniVoiceRequest(text=t, instructions=i, **KNOBS) for t, i in zip(texts, instructs, strict=True)],
                     stagger=3)  # the second joins 3 steps later: rows at different steps batch
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def test_gumbel_noise_fed_identically_gives_the_reference_codes(reference: Any, ours: Any) -> None:
    for text, instruct, cfg in (("hello there", None, {"position_temperature": 5.0, "class_temperature": 0.0}),
                                ("how are you today", "male, whisper", {"position_temperature": 5.0,
                                                                       "class_temperature": 1.0})):
        want = _reference_codes(reference, [text], [instruct], cfg, np.random.default_rng(np.random.PCG64(11)))
        (got,) = _our_codes(ours, [OmniVoiceRequest(text=text, instructions=instruct, seed=11, num_step=NUM_STEP,
                                                    **cfg)])
        np.testing.assert_array_equal(got, want[0])


def test_cloning_from_precomputed_codes_gives_the_reference_codes(reference: Any, ours: Any) -> None:
    """A reference clip's codes + transcript (the reference's VoiceClonePrompt): `<|denoise|>`, the
    transcript before the text, the codes before the target, the estimate at the clip's own rate."""
    import torch

    from export.omnivoice.reference import omnivoice_module

    mod = omnivoice_module()
    ref_codes = np.random.default_rng(5).integers(0, 1024, (8, 17))
    prompt = mod.VoiceClonePrompt(ref_audio_tokens=torch.from_numpy(ref_codes), ref_text="nice to meet you",
                                  ref_rms=0.05)
    text = "the quick brown fox jumps"
    task = reference._preprocess_all(text=[text], voice_clone_prompt=prompt, instruct=["male"])
    config = mod.OmniVoiceGenerationConfig(num_step=NUM_STEP, position_temperature=0.0, class_temperature=0.0)
    with torch.no_grad():
        want = reference._generate_iterative(task, config)[0].numpy()
    (got,) = _our_codes(ours, [OmniVoiceRequest(text=text, instructions="male", ref_codes=ref_codes,
                                                ref_text="nice to meet you", **KNOBS)])
    np.testing.assert_array_equal(got, want)


LONG = ("The quick brown fox jumps over the lazy dog. " * 6 + "Mr. Smith said hello, and then he left! "
        "Did anyone notice? " * 3 + "Speech synthesis with many sentences is streamed sentence by sentence. " * 3)


def test_long_text_is_generated_in_the_reference_s_chunks_each_streamed_as_it_completes(reference: Any,
                                                                                         ours: Any) -> None:
    """Past 30 s estimated: the reference's chunks, the first chunk's codes and text the reference of
    the later ones; each chunk's audio is one chunk event, sent when that chunk is done."""
    import torch

    from export.omnivoice.reference import omnivoice_module

    mod = omnivoice_module()
    task = reference._preprocess_all(text=[LONG], instruct=["female"])
    assert task.target_lens[0] > 750
    config = mod.OmniVoiceGenerationConfig(num_step=4, position_temperature=0.0, class_temperature=0.0)
    with torch.no_grad():
        want = [t.numpy() for t in reference._generate_chunked(task, config)[0]]
    assert len(want) >= 3
    gen = Generator(ours)
    gen.submit("long", OmniVoiceRequest(text=LONG, instructions="female", num_step=4, position_temperature=0.0,
                                        class_temperature=0.0))
    events, steps = [], 0
    while gen.num_active:
        events += [(steps, ev) for ev in gen.step()]
        steps += 1
    audible = [(s, ev) for s, ev in events if ev.frames]
    assert [s for s, _ in audible] == [4 * (i + 1) - 1 for i in range(len(want))]  # one per chunk, as it completes
    for (_, ev), w in zip(audible, want, strict=True):
        assert ev.codes is not None
        np.testing.assert_array_equal(ev.codes.T, w)
        assert ev.pcm.shape == (ev.frames * 960,)
    assert events[-1][1].final and events[-1][1].usage.output_tokens == sum(w.shape[1] for w in want)


def test_sentence_chunks_are_the_reference_s_chunked_generation_at_the_stream_chunk_size(reference: Any,
                                                                                         ours: Any) -> None:
    """A streamed request (`sentence_chunks`) of any length: the reference's own `_generate_chunked`
    with audio_chunk_duration = STREAM_CHUNK_SECONDS and no threshold, one chunk event per chunk as it
    completes; a whole request of the same text stays one generation (the reference's default)."""
    import torch

    from export.omnivoice.reference import omnivoice_module
    from ttscore.contract.omnivoice import STREAM_CHUNK_SECONDS

    mod = omnivoice_module()
    text = "The first sentence is short. Then a second one follows, with a clause. And a third ends it!"
    task = reference._preprocess_all(text=[text], instruct=["male"])
    config = mod.OmniVoiceGenerationConfig(num_step=4, position_temperature=0.0, class_temperature=0.0,
                                           audio_chunk_duration=STREAM_CHUNK_SECONDS, audio_chunk_threshold=0.0)
    with torch.no_grad():
        want = [t.numpy() for t in reference._generate_chunked(task, config)[0]]
    assert len(want) >= 2
    knobs = {"num_step": 4, "position_temperature": 0.0, "class_temperature": 0.0}
    events = list(Generator(ours).synthesize(OmniVoiceRequest(text=text, instructions="male", sentence_chunks=True,
                                                              **knobs)))
    audible = [ev for ev in events if ev.frames]
    assert len(audible) == len(want)
    for ev, w in zip(audible, want, strict=True):
        assert ev.codes is not None
        np.testing.assert_array_equal(ev.codes.T, w)
    whole = list(Generator(ours).synthesize(OmniVoiceRequest(text=text, instructions="male", **knobs)))
    assert len([ev for ev in whole if ev.frames]) == 1


def test_audio_matches_the_reference_decoder(reference: Any, ours: Any) -> None:
    import torch

    req = OmniVoiceRequest(text="Speech synthesis is fun.", instructions="child", **KNOBS)
    events = list(Generator(ours).synthesize(req))
    assert len(events) == 1 and events[0].final and events[0].finish_reason == "stop"
    ev = events[0]
    assert ev.codes is not None
    with torch.no_grad():
        want = reference.audio_tokenizer.decode(torch.from_numpy(ev.codes.T.copy())[None]).audio_values[0, 0].numpy()
    assert ev.pcm.shape == want.shape == (ev.frames * 960,)
    assert np.abs(ev.pcm - want).max() <= AUDIO_RTOL * np.abs(want).max()


def test_languages_resolve_as_in_the_reference(reference: Any, ours: Any) -> None:
    from export.omnivoice.reference import omnivoice_module

    resolve = omnivoice_module()._resolve_language
    for language in ("English", "en", "CHINESE", "zh", "None", "yue", "Japanese"):
        req = OmniVoiceRequest(text="hi", language=language)
        prompt = reference._prepare_inference_inputs("hi", 1, lang=resolve(language))["input_ids"][0, :, :-1].numpy()
        np.testing.assert_array_equal(ours.admit(req).cond_ids[:, : prompt.shape[1]], prompt)


def test_the_frame_estimate_is_the_reference_s(reference: Any, ours: Any) -> None:
    for text in ("Hi.", "A much longer sentence, with commas; and 123 digits!", "你好，世界。", "Привет мир"):
        task = reference._preprocess_all(text=[text])
        assert ours.admit(OmniVoiceRequest(text=text)).tokens.shape[1] == task.target_lens[0], text
    task = reference._preprocess_all(text=["twice as fast"], speed=2.0)
    assert ours.admit(OmniVoiceRequest(text="twice as fast", speed=2.0)).tokens.shape[1] == task.target_lens[0]
