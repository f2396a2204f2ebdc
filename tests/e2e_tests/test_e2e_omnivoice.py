"""OmniVoice through the whole stack, in the session's shared mixed deployment (e2e_triton: next to
Qwen3-TTS and VoxCPM2). With both temperatures 0 (`extra_params`) the audio of /v1/audio/speech
(whole file, raw stream, SSE), the openai SDK and the WebSocket equals the offline engine's within
one 16-bit step, and the offline engine's codes equal the reference's (`omnivoice==0.2.1`
`_generate_iterative`), for the auto voice and voice design. A streamed multi-sentence request is
generated sentence chunk by sentence chunk: its first SSE audio event is the first chunk's audio
alone, sent before the later chunks' events (the order of events, not timing). Cloning from
`ref_audio` (with and without `ref_text`) and from an uploaded voice equals the offline engine fed the
clip's codes from clone.ReferenceEncoder (the path `say --ref-audio` takes). /v1/models lists it;
every refused field is a 400 naming it and the next request succeeds. An OmniVoice checkpoint the
project did not make (omnivoice_fixtures.omnivoice_foreign, served in the same deployment): with both
temperatures 0 its whole file, raw stream and SSE equal the reference decoder's audio of the
reference's own codes within the parity tests' bound, for the auto voice, voice design and cloning.
"""

from __future__ import annotations

import math
from typing import Any

import e2e_speech as e2e
import numpy as np
import pytest
import soundfile as sf
from e2e_speech import SPEECH, data_url, same_audio, sse_deltas, wav_at

from gateway import encoding
from ttscore.runtime.engine import ChunkEvent

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TEXT = "Hello from OmniVoice."
MULTI = "The first sentence is short. Then a second one follows, with a clause. And a third ends it!"
DESIGN = "female, low pitch"
NUM_STEP = 8
KNOBS = {"num_step": NUM_STEP, "position_temperature": 0.0, "class_temperature": 0.0}


@pytest.fixture(scope="module")
def stack(e2e_triton, tmp_path_factory):
    ref = tmp_path_factory.mktemp("omnivoice-ref") / "ref.wav"
    e2e.write_tone(ref, 24000, 1.5)
    with e2e.family_stack(e2e_triton, tmp_path_factory, "omnivoice", "omni",
                          checkpoint=e2e_triton["checkpoints"]["omnivoice"],
                          artifacts=e2e_triton["artifacts"]["omnivoice"], ref=ref) as stack:
        yield stack


def offline_events(stack, text: str = TEXT, instructions: str | None = None, **fields: Any) -> list[ChunkEvent]:
    """The offline engine with the tensors the gateway sends (the family's request_from_tensors)."""
    return e2e.offline_events(stack["model"], "omnivoice", chunk_policy=None, text=text, instructions=instructions,
                              **KNOBS, **fields)


def offline(stack, text: str = TEXT, instructions: str | None = None, **fields: Any) -> np.ndarray:
    return np.concatenate([e.pcm for e in offline_events(stack, text, instructions, **fields)])




def body(stack, **kw):
    return {"input": TEXT, "model": stack["omni"], "extra_params": dict(KNOBS), **kw}


def wav_of(r) -> np.ndarray:
    return wav_at(r, 24000)


def test_models_lists_it_with_family_rate_and_voices(http, stack):
    cards = e2e.model_cards(http)
    card = cards[stack["omni"]]
    assert (card["family"], card["sample_rate"], card["voices"]) == ("omnivoice", 24000, [])
    assert {cards[stack["names"]["custom_voice"]]["family"], cards[stack["names"]["voxcpm2"]]["family"]} == {
        "qwen3_tts", "voxcpm2"}


def test_offline_codes_equal_the_reference_s(stack):
    """The chain's other half: the offline engine (which the API equals below) gives the reference's
    codes for the auto voice and voice design (tests/export_tests/test_omnivoice_parity.py in full)."""
    import torch

    from export.omnivoice.reference import load_reference, omnivoice_module

    reference = load_reference(stack["checkpoint"])
    mod = omnivoice_module()
    config = mod.OmniVoiceGenerationConfig(num_step=NUM_STEP, postprocess_output=False, position_temperature=0.0,
                                           class_temperature=0.0)
    for instructions in (None, DESIGN):
        task = reference._preprocess_all(text=[TEXT], instruct=[instructions])
        with torch.no_grad():
            want = reference._generate_iterative(task, config)[0].numpy()
        (event,) = offline_events(stack, TEXT, instructions)
        assert event.codes is not None
        np.testing.assert_array_equal(event.codes.T, want)


@pytest.mark.parametrize("instructions", [None, DESIGN])
def test_whole_file_raw_stream_and_sse_equal_the_offline_engine(http, stack, instructions):
    want = offline(stack, TEXT, instructions)
    extra = {} if instructions is None else {"instructions": instructions}
    same_audio(wav_of(http.post(SPEECH, json=body(stack, voice="default", **extra))), want)
    same_audio(e2e.streamed_pcm(http, body(stack, **extra)), want)  # one sentence: one chunk, the whole generation
    with http.stream("POST", SPEECH, json=body(stack, response_format="pcm", stream=True, **extra)) as r:
        deltas = sse_deltas(r)
    same_audio(np.frombuffer(b"".join(deltas), "<i2"), want)


def test_language_seed_and_speed_reach_the_model(http, stack):
    same_audio(wav_of(http.post(SPEECH, json=body(stack, language="English"))), offline(stack, language="en"))
    same_audio(wav_of(http.post(SPEECH, json=body(stack, speed=1.5))), offline(stack, speed=1.5))
    slow = wav_of(http.post(SPEECH, json=body(stack, speed=0.5)))
    assert slow.size > wav_of(http.post(SPEECH, json=body(stack))).size  # duration scaling, not a post-hoc stretch
    # The default temperatures sample (Gumbel noise): the seed makes it the offline engine's.
    seeded = body(stack, seed=3, extra_params={"num_step": NUM_STEP})
    want, _ = e2e.offline_audio(stack["model"], "omnivoice", chunk_policy=None, text=TEXT, num_step=NUM_STEP, seed=3)
    same_audio(wav_of(http.post(SPEECH, json=seeded)), want)


def test_a_streamed_multi_sentence_request_sends_its_first_sentence_before_the_last(http, stack):
    events = offline_events(stack, MULTI, sentence_chunks=True)
    chunks = [e for e in events if e.frames]
    assert len(chunks) >= 2  # one audio event per sentence chunk, each as it completes
    whole = offline(stack, MULTI)  # a whole-file request: one generation (the reference's rule under 30 s)
    same_audio(wav_of(http.post(SPEECH, json=body(stack, input=MULTI))), whole)
    with http.stream("POST", SPEECH, json=body(stack, input=MULTI, response_format="pcm", stream=True)) as r:
        deltas = sse_deltas(r)
    # The first event carries exactly the first chunk's audio: it was sent before the later chunks
    # were generated (their audio arrives in later events).
    assert len(deltas) >= len(chunks)
    same_audio(np.frombuffer(deltas[0], "<i2"), chunks[0].pcm)
    same_audio(np.frombuffer(b"".join(deltas), "<i2"), np.concatenate([e.pcm for e in events]))
    same_audio(e2e.streamed_pcm(http, body(stack, input=MULTI)), np.concatenate([e.pcm for e in events]))


def test_openai_sdk_against_its_id(stack):
    client = e2e.sdk(stack["url"])
    samples = e2e.sdk_wav(client, 24000, model=stack["omni"], voice="default", input=TEXT,
                          extra_body={"extra_params": KNOBS})
    same_audio(samples, offline(stack))
    pcm = e2e.sdk_pcm(client, {"extra_params": KNOBS}, model=stack["omni"], voice="default", input=TEXT,
                      instructions=DESIGN)
    same_audio(pcm, offline(stack, TEXT, DESIGN))


def test_websocket_with_its_id(stack):
    config = {"model": stack["omni"], "instructions": DESIGN, "extra_params": KNOBS}
    same_audio(e2e.websocket_audio(stack["url"], config, TEXT), offline(stack, TEXT, DESIGN))


def clone_codes(stack) -> np.ndarray:
    """The reference clip's codes as `say --ref-audio` computes them."""
    from ttscore.contract.manifest import read_manifest
    from ttscore.runtime.families.omnivoice.clone import ReferenceEncoder

    audio, rate = sf.read(stack["ref"], dtype="float32")
    return ReferenceEncoder(stack["artifacts"], read_manifest(stack["artifacts"]), None).codes(audio, rate)


def test_cloning_from_ref_audio_with_and_without_ref_text(http, stack):
    codes = clone_codes(stack)
    assert codes.shape[0] == 8 and codes.shape[1] > 0
    ref = data_url(stack["ref"])
    got = wav_of(http.post(SPEECH, json=body(stack, ref_audio=ref)))
    same_audio(got, offline(stack, ref_audio_codes=codes))
    got = wav_of(http.post(SPEECH, json=body(stack, ref_audio=ref, ref_text="A reference clip", instructions=DESIGN)))
    want = offline(stack, TEXT, DESIGN, ref_audio_codes=codes, ref_text="A reference clip.")  # add_punctuation
    same_audio(got, want)
    assert not np.array_equal(want, offline(stack, TEXT, DESIGN))
    with http.stream("POST", SPEECH, json=body(stack, ref_audio=ref, input=MULTI, response_format="pcm",
                                              stream=True)) as r:
        deltas = sse_deltas(r)
    chunks = [e for e in offline_events(stack, MULTI, ref_audio_codes=codes, sentence_chunks=True) if e.frames]
    assert len(deltas) >= len(chunks) >= 2
    same_audio(np.frombuffer(b"".join(deltas), "<i2"), np.concatenate([e.pcm for e in chunks]))


def test_uploaded_voice_clones_with_its_codes(http, stack):
    codes = clone_codes(stack)
    for name, ref_text in (("omni_plain", None), ("omni_told", "A reference clip.")):
        e2e.upload_voice(http, stack["ref"], name, ref_text)
        got = wav_of(http.post(SPEECH, json=body(stack, voice=name)))
        same_audio(got, offline(stack, ref_audio_codes=codes, ref_text=ref_text))
    assert {"omni_plain", "omni_told"} <= set(http.get("/v1/audio/voices").json()["voices"])


def test_a_clip_the_encoder_refuses_is_a_400_naming_ref_audio(http, stack):
    silent = stack["ref"].parent / "silent.wav"
    sf.write(silent, np.zeros(24000, np.float32), 24000, subtype="FLOAT")
    e2e.assert_refused(http.post(SPEECH, json=body(stack, ref_audio=data_url(silent))), "ref_audio")
    assert wav_of(http.post(SPEECH, json=body(stack))).size


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"voice": "alloy"}, "voice"),
        ({"language": "Klingon"}, "language"),
        ({"instructions": "sounds like a dragon"}, "instructions"),
        ({"ref_audio": "data:audio/wav;base64,AAAA"}, "ref_audio"),
        ({"voice": "no_such_upload"}, "voice"),
        ({"ref_text": "A transcript without audio."}, "ref_text"),
        ({"max_new_tokens": 2}, "max_new_tokens"),
        ({"extra_params": {"temperature": 0.7}}, "extra_params"),
        ({"extra_params": {"num_step": 0}}, "extra_params"),
        ({"extra_params": {"guidance_scale": "high"}}, "extra_params"),
        ({"x_vector_only_mode": True}, "x_vector_only_mode"),
        ({"non_streaming_mode": True}, "non_streaming_mode"),
        ({"initial_codec_chunk_frames": 2}, "initial_codec_chunk_frames"),
        ({"task_type": "VoiceDesign"}, "task_type"),
        ({"temperature": 0.7}, "temperature"),
        ({"speaker_embedding": [0.1, 0.2]}, "speaker_embedding"),
        ({"speed": 8.0}, "speed"),
        ({"input": "   "}, "input"),
    ],
)
def test_refused_field_is_a_400_naming_it(http, stack, extra, param):
    e2e.assert_refused(http.post(SPEECH, json=body(stack, **extra)), param)


def test_the_next_request_after_a_refusal_is_served(http, stack):
    e2e.assert_served_after_a_refusal(http, body(stack, max_new_tokens=0), body(stack), 24000)


# --- an OmniVoice checkpoint the project did not make (omnivoice_fixtures.omnivoice_foreign) -----------

AUDIO_RTOL = 1e-4  # the parity tests' bound: max |ours - reference| / max |reference| of the decoded audio


@pytest.fixture(scope="module")
def foreign(e2e_triton):
    from export.omnivoice.reference import load_reference

    checkpoint = e2e_triton["checkpoints"]["omnivoice_foreign"]
    return {"model": e2e_triton["names"]["omnivoice_foreign"], "checkpoint": checkpoint,
            "reference": load_reference(checkpoint)}


def reference_audio(foreign, text: str, instructions: str | None = None, prompt: Any = None) -> np.ndarray:
    """The reference's codes (`_generate_iterative`, both temperatures 0, as the parity tests run it)
    decoded by the reference's codec decoder."""
    import torch

    from export.omnivoice.reference import omnivoice_module

    mod, reference = omnivoice_module(), foreign["reference"]
    config = mod.OmniVoiceGenerationConfig(num_step=NUM_STEP, postprocess_output=False, position_temperature=0.0,
                                           class_temperature=0.0)
    task = reference._preprocess_all(text=[text], instruct=[instructions], voice_clone_prompt=prompt)
    with torch.no_grad():
        codes = reference._generate_iterative(task, config)[0]
        audio = reference.audio_tokenizer.decode(codes[None]).audio_values[0, 0].numpy()
    assert len(np.unique(codes.numpy())) > 20  # not a degenerate utterance
    return audio


def assert_reference_audio(got_int16: np.ndarray, want: np.ndarray) -> None:
    """Within AUDIO_RTOL of the reference's peak, in 16-bit steps: to_int16 floors, so two signals
    |a - b| apart differ by at most ceil(|a - b| * 2^15) steps."""
    bound = max(1, math.ceil(AUDIO_RTOL * np.abs(want).max() * 32768))
    ref = encoding.to_int16(want).astype(np.int32)
    assert got_int16.shape == ref.shape, (got_int16.shape, ref.shape)
    assert np.max(np.abs(got_int16.astype(np.int32) - ref)) <= bound


FOREIGN_TEXT = "Pack my box with five dozen liquor jugs."  # one sentence: one stream chunk


@pytest.mark.parametrize("instructions", [None, "elderly, high pitch"])
def test_foreign_checkpoint_auto_voice_and_design_equal_the_reference(http, stack, foreign, instructions):
    want = reference_audio(foreign, FOREIGN_TEXT, instructions)
    extra = {} if instructions is None else {"instructions": instructions}
    for got in e2e.three_ways(http, body(stack, model=foreign["model"], input=FOREIGN_TEXT, **extra), 24000).audio:
        assert_reference_audio(got, want)


def test_foreign_checkpoint_clones_as_the_reference(http, stack, foreign, tmp_path):
    """The clip's codes as the reference's tokenizer class (transformers 5.14's
    HiggsAudioV2TokenizerModel, ref5) encodes the preprocessed clip, then the reference's generation
    with that VoiceClonePrompt (as tests/export_tests/test_omnivoice_clone.py)."""
    import refenv
    import torch

    from export.omnivoice.reference import omnivoice_module
    from ttscore.contract import omnivoice as spec
    from ttscore.runtime.families.omnivoice.clone import preprocess

    rate, transcript = 22050, "sphinx of black quartz judge my vow"
    t = np.arange(int(rate * 0.9)) / rate
    burst = (0.3 * np.sin(2 * np.pi * 180 * t) * np.clip(np.sin(2 * np.pi * 2.5 * t), 0, None) ** 0.5
             + 0.1 * np.sin(2 * np.pi * 1300 * t)).astype(np.float32)
    clip = np.concatenate([burst, np.zeros(rate // 2, np.float32), burst[::-1]])
    path = tmp_path / "foreign_ref.wav"
    sf.write(path, clip, rate, subtype="FLOAT")
    out = refenv.run(refenv.env_for(spec.FAMILY), refenv.TESTS / "omnivoice_codec_ref5.py",
                     {"audio_0": preprocess(clip, rate)}, [str(foreign["checkpoint"] / "audio_tokenizer"), "encode"])
    mod = omnivoice_module()
    prompt = mod.VoiceClonePrompt(ref_audio_tokens=torch.from_numpy(out["codes_0"]), ref_text=transcript + ".",
                                  ref_rms=0.1)
    want = reference_audio(foreign, FOREIGN_TEXT, None, prompt)
    request = body(stack, model=foreign["model"], input=FOREIGN_TEXT, ref_audio=data_url(path), ref_text=transcript)
    for got in e2e.three_ways(http, request, 24000).audio:
        assert_reference_audio(got, want)
