"""End-to-end parity of the exported numpy + ONNX Runtime pipeline with the reference qwen-tts.

Greedy codes must be identical and audio within 1e-4 for CustomVoice, VoiceDesign, Base in-context
cloning and Base x-vector-only. The reference `generate` returns one frame fewer than
max_new_tokens when the budget is hit (the last sampled code0 never gets its code-predictor pass);
we emit that frame, so the comparison covers the reference's frames, which must be a prefix of ours.
"""

from __future__ import annotations

import numpy as np
import pytest

from ttscore.runtime.engine import Generator
from ttscore.runtime.families.qwen3_tts.request import Qwen3TTSRequest

pytestmark = [pytest.mark.parity, pytest.mark.slow]

N = 12  # max_new_tokens for the comparisons


def run_ours(pipe, req: Qwen3TTSRequest, chunk_policy: str = "fixed"):
    # "fixed" repeats bit for bit; "adaptive" follows measured step times (see ttscore.runtime.engine)
    gen = Generator(pipe, max_batch=2, chunk_policy=chunk_policy)
    pcm, codes, finals = [], [], 0
    for ev in gen.synthesize(req):
        pcm.append(ev.pcm)
        codes.append(ev.codes)
        finals += ev.final
    assert finals == 1
    return np.concatenate(pcm), np.concatenate(codes)


def run_reference(ref, method: str, **kwargs):
    captured = {}
    st = ref.model.speech_tokenizer
    orig = st.decode

    def spy(items):
        captured["codes"] = [np.asarray(d["audio_codes"]) for d in items]
        return orig(items)

    st.decode = spy
    try:
        wavs, sr = getattr(ref, method)(
            max_new_tokens=N, do_sample=False, subtalker_dosample=False, **kwargs
        )
    finally:
        st.decode = orig
    assert sr == 24000
    return wavs[0], captured["codes"][0]


def assert_parity(ours_pcm, ours_codes, ref_wav, ref_codes, ref_frames=0):
    ref_codes = ref_codes[ref_frames:]
    n = ref_codes.shape[0]
    assert n >= 1
    np.testing.assert_array_equal(ours_codes[:n], ref_codes)
    spf = 1920
    np.testing.assert_allclose(ours_pcm[: n * spf], ref_wav[: n * spf], atol=1e-4, rtol=0)
    assert np.sqrt(np.mean(ours_pcm**2)) > 1e-3  # not silence


def test_custom_voice(custom_voice):
    ckpt, pipe, ref = custom_voice
    for speaker, language, text in [("vivian", "English", "Hello world, this is a test."), ("eric", "Chinese", "今天天气很好。")]:
        ours = run_ours(pipe, Qwen3TTSRequest(text=text, speaker=speaker, language=language, max_new_tokens=N,
                                               do_sample=False, subtalker_do_sample=False))
        ref_wav, ref_codes = run_reference(ref, "generate_custom_voice", text=text, speaker=speaker, language=language)
        assert_parity(*ours, ref_wav, ref_codes)


def test_custom_voice_streaming_text_mode_and_instructions(custom_voice):
    ckpt, pipe, ref = custom_voice
    text = "Streaming text mode feeds one token per frame."
    ours = run_ours(pipe, Qwen3TTSRequest(text=text, speaker="ryan", language="Auto", non_streaming_mode=False,
                                           instructions="Speak softly.", max_new_tokens=N,
                                           do_sample=False, subtalker_do_sample=False))
    ref_wav, ref_codes = run_reference(ref, "generate_custom_voice", text=text, speaker="ryan", language="Auto",
                                       instruct="Speak softly.", non_streaming_mode=False)
    assert_parity(*ours, ref_wav, ref_codes)


@pytest.mark.parametrize("instruct", ["A deep, slow male voice.", "  A deep, slow male voice.\n"])
def test_voice_design(voice_design, instruct):
    """Instructions with outer whitespace are tokenized as given, as qwen-tts (and vLLM-Omni) do."""
    ckpt, pipe, ref = voice_design
    text = "A calm narrator reads this line."
    ours = run_ours(pipe, Qwen3TTSRequest(text=text, instructions=instruct, language="English", max_new_tokens=N,
                                           do_sample=False, subtalker_do_sample=False))
    ref_wav, ref_codes = run_reference(ref, "generate_voice_design", text=text, instruct=instruct, language="English")
    assert_parity(*ours, ref_wav, ref_codes)


def _ref_audio(seconds=1.5, sr=24000):
    t = np.arange(int(seconds * sr)) / sr
    rng = np.random.default_rng(3)
    return (0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * rng.normal(size=t.shape)).astype(np.float32), sr


@pytest.mark.parametrize("non_streaming", [False, True])
def test_base_icl(base, non_streaming):
    ckpt, pipe, ref = base
    wav, sr = _ref_audio()
    ref_text = "This is the reference transcript."
    xvec, codes = pipe.voice_features(wav, sr, with_codes=True)
    text = "Clone this voice please."
    ours = run_ours(pipe, Qwen3TTSRequest(text=text, language="English", ref_text=ref_text, ref_codes=codes,
                                           x_vector=xvec, non_streaming_mode=non_streaming, max_new_tokens=N,
                                           do_sample=False, subtalker_do_sample=False))
    ref_wav, ref_codes = run_reference(ref, "generate_voice_clone", text=text, language="English",
                                       ref_audio=(wav, sr), ref_text=ref_text, non_streaming_mode=non_streaming)
    n_ref = codes.shape[0]
    np.testing.assert_array_equal(ref_codes[:n_ref], codes)  # reference codes from our speech encoder
    # reference cuts int(ref_len / total_len * samples); with exact 1920-sample frames that is n_ref*1920
    assert_parity(*ours, ref_wav, ref_codes, ref_frames=n_ref)


def test_base_x_vector_only(base):
    ckpt, pipe, ref = base
    wav, sr = _ref_audio(1.0, 16000)
    xvec, codes = pipe.voice_features(wav, sr, with_codes=False)
    assert codes is None
    text = "Only the speaker embedding is used."
    ours = run_ours(pipe, Qwen3TTSRequest(text=text, language="Auto", x_vector=xvec, x_vector_only=True,
                                           max_new_tokens=N, do_sample=False, subtalker_do_sample=False))
    ref_wav, ref_codes = run_reference(ref, "generate_voice_clone", text=text, language="Auto",
                                       ref_audio=(wav, sr), x_vector_only_mode=True)
    assert_parity(*ours, ref_wav, ref_codes)


def test_batching_changes_nothing(custom_voice):
    ckpt, pipe, ref = custom_voice
    reqs = {
        "a": Qwen3TTSRequest(text="First request in the batch.", speaker="vivian", max_new_tokens=N, seed=1),
        "b": Qwen3TTSRequest(text="Second, a longer request that joins the same batch.", speaker="eric",
                              language="Chinese", max_new_tokens=N + 5, seed=2, initial_chunk_frames=2, chunk_frames=3),
        "c": Qwen3TTSRequest(text="Third.", speaker="ryan", max_new_tokens=N - 4, seed=3, do_sample=False),
    }
    solo = {k: run_ours(pipe, r) for k, r in reqs.items()}
    gen = Generator(pipe, max_batch=4)
    got = {k: ([], []) for k in reqs}
    gen.submit("a", reqs["a"])
    pending = ["b", "c"]
    finals = 0
    while gen.num_active or pending:
        if pending:  # join mid-flight, one per step
            k = pending.pop(0)
            gen.submit(k, reqs[k])
        for ev in gen.step():
            got[ev.req_id][0].append(ev.pcm)
            got[ev.req_id][1].append(ev.codes)
            finals += ev.final
    assert finals == 3
    for k in reqs:
        np.testing.assert_array_equal(np.concatenate(got[k][1]), solo[k][1])
        np.testing.assert_allclose(np.concatenate(got[k][0]), solo[k][0], atol=1e-4, rtol=0)


def test_same_seed_same_audio(custom_voice):
    ckpt, pipe, ref = custom_voice
    req = Qwen3TTSRequest(text="Sampling with a seed is reproducible.", speaker="vivian", max_new_tokens=10, seed=1234)
    a = run_ours(pipe, req)
    b = run_ours(pipe, req)
    np.testing.assert_array_equal(a[1], b[1])
    np.testing.assert_array_equal(a[0], b[0])
    c = run_ours(pipe, Qwen3TTSRequest(text=req.text, speaker="vivian", max_new_tokens=10, seed=99))
    assert not np.array_equal(a[1], c[1])
    # the timing-driven schedule: same codes, audio within one 16-bit step
    d = run_ours(pipe, req, chunk_policy="adaptive")
    np.testing.assert_array_equal(a[1], d[1])
    np.testing.assert_allclose(d[0], a[0], rtol=0, atol=1 / 32768)


def test_generator_refuses_more_than_max_batch(custom_voice):
    ckpt, pipe, ref = custom_voice
    gen = Generator(pipe, max_batch=1)
    gen.submit("a", Qwen3TTSRequest(text="One.", speaker="vivian", max_new_tokens=2))
    with pytest.raises(RuntimeError, match="max_batch"):
        gen.submit("b", Qwen3TTSRequest(text="Two.", speaker="vivian", max_new_tokens=2))
    assert gen.cancel("a") and gen.num_active == 0
    gen.submit("b", Qwen3TTSRequest(text="Two.", speaker="vivian", max_new_tokens=2))  # the slot is free again
