"""Breeze-TTS-2 through the whole stack, served next to Qwen3-TTS and VoxCPM2: its own deployment of
four tiny checkpoints (a greedy Qwen3-TTS CustomVoice, VoxCPM2, the project's Breeze-TTS-2 and one
Breeze-TTS-2 checkpoint the project did not make, tests/breeze_tts_2_foreign.py) rendered as
`triton-tts serve` renders it, so the session's shared mixed deployment keeps its start-up time.
/v1/models lists them; plain (`voice` S0..S9), design (`instructions`), clone (`ref_audio` +
`ref_text`) and direction (reference + `instructions`) audio through the raw stream, SSE, the whole
file, the openai SDK and the WebSocket equals the offline engine's within one 16-bit step, and for
the foreign checkpoint the engine's codes equal the reference composition's (ref5) in the four
modes; an uploaded voice and a precomputed voice file equal the same request with `ref_audio` +
`ref_text`; every refused field is a 400 naming it and the next request succeeds; one request of
each family in flight together.
"""

from __future__ import annotations

import json

import e2e_speech as e2e
import numpy as np
import pytest
import soundfile as sf
from breeze_tts_2_fixtures import reference, run_codes
from e2e_speech import SPEECH, data_url, same_audio, wav_at
from gateway_fixtures import render_stack_repository

from ttscore.runtime.families import load_model

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TEXT = "Hello from Breeze."
FRAMES = 6
DESIGN = "A calm, low voice."
REF_TEXT = "A reference clip."
PRECOMPUTED = "breeze_pre"
# The four modes as request fields (`ref`: the reference clip with REF_TEXT, as ref_audio).
MODES = {
    "plain": {"voice": "S3"},
    "design": {"instructions": DESIGN},
    "clone": {"ref": True},
    "direction": {"ref": True, "instructions": DESIGN},
}


@pytest.fixture(scope="module")
def stack(triton_server, tmp_path_factory, tiny_custom_voice_greedy, voxcpm2_tiny, voxcpm2_artifacts,
          breeze_tiny, breeze_export, breeze_foreign, breeze_foreign_export):
    from ttscore.runtime.families.breeze_tts_2.offline import precompute_voice

    work = tmp_path_factory.mktemp("e2e-breeze")
    ref = work / "ref.wav"
    e2e.write_tone(ref, 16000, 1.2, hz=180, wobble_hz=2, floor=0)  # 16 kHz: the encoder resamples
    voices = work / "voices"
    precompute_voice(breeze_export, PRECOMPUTED, ref, REF_TEXT, voices)
    pairs = [tiny_custom_voice_greedy[:2], (voxcpm2_tiny, voxcpm2_artifacts), (breeze_tiny, breeze_export),
             (breeze_foreign, breeze_foreign_export)]
    repo, cfg = render_stack_repository(work, pairs, max_active=2)
    server = triton_server(repo, ready_timeout_s=180)
    cfg = {**cfg, "triton_url": server.grpc_url, "custom_voice_dir": str(voices)}
    names = dict(zip(("qwen", "vox", "breeze", "foreign"), (m["name"] for m in cfg["models"]), strict=True))
    with e2e.serve_gateway(cfg, tmp_path_factory.mktemp("breeze-speakers")) as url:
        yield {"url": url, "names": names, "breeze": names["breeze"], "ref": ref, "foreign_checkpoint": breeze_foreign,
               "models": {"breeze": load_model(breeze_export), "foreign": load_model(breeze_foreign_export)}}


def ref_codes(stack, key: str = "breeze") -> np.ndarray:
    """The reference clip's codes as the offline engine makes them (say --ref-audio)."""
    wav, sr = sf.read(stack["ref"], dtype="float32")
    return stack["models"][key].encode_reference(wav, sr)


def offline(stack, voice: str = "S0", instructions: str | None = None, ref: bool = False,
            key: str = "breeze") -> np.ndarray:
    """The offline engine with the tensors the gateway sends (the family's request_from_tensors)."""
    fields = {"text": TEXT, "speaker": voice, "instructions": instructions, "max_new_tokens": FRAMES}
    if ref:
        fields.update(ref_codes=ref_codes(stack, key), ref_text=REF_TEXT)
    return e2e.offline_audio(stack["models"][key], "breeze_tts_2", **fields)[0]




def body(stack, **kw):
    return {"input": TEXT, "model": stack["breeze"], "max_new_tokens": FRAMES, **kw}


def wav_of(r) -> np.ndarray:
    return wav_at(r, 24000)


def mode_fields(stack, mode: str) -> dict:
    """A mode's request fields (the reference as a ref_audio data URL with its transcript)."""
    fields = {k: v for k, v in MODES[mode].items() if k != "ref"}
    if MODES[mode].get("ref"):
        fields.update(ref_audio=data_url(stack["ref"]), ref_text=REF_TEXT)
    return fields


def three_ways(http, payload: dict) -> list[np.ndarray]:
    """The same request as the whole file, the raw PCM stream and SSE events: int16 samples of each."""
    return e2e.three_ways(http, payload, 24000).audio


def test_models_lists_it_with_family_and_rate(http, stack):
    cards = e2e.model_cards(http)
    card = cards[stack["breeze"]]
    assert (card["family"], card["sample_rate"]) == ("breeze_tts_2", 24000)
    assert {cards[stack["names"]["qwen"]]["family"], cards[stack["names"]["vox"]]["family"]} == {"qwen3_tts", "voxcpm2"}


@pytest.mark.parametrize(("voice", "instructions"), [(None, None), ("S3", None), ("S0", DESIGN)])
def test_whole_file_raw_stream_and_sse_equal_the_offline_engine(http, stack, voice, instructions):
    want = offline(stack, voice or "S0", instructions)
    extra = {k: v for k, v in (("voice", voice), ("instructions", instructions)) if v is not None}
    for got in three_ways(http, body(stack, **extra)):
        same_audio(got, want)


@pytest.mark.parametrize("mode", ["clone", "direction"])
def test_clone_and_direction_from_ref_audio_equal_the_offline_engine(http, stack, mode):
    """The gateway's breeze_speech_encoder (16 kHz clip resampled to 24 kHz) makes the offline codes."""
    want = offline(stack, instructions=MODES[mode].get("instructions"), ref=True)
    for got in three_ways(http, body(stack, **mode_fields(stack, mode))):
        same_audio(got, want)
    assert not np.array_equal(want, offline(stack, instructions=MODES[mode].get("instructions")))


@pytest.fixture(scope="module")
def foreign_reference(stack) -> dict[str, np.ndarray]:
    """The reference composition's codes (transformers 5.14.1, ref5) of the four modes on the foreign checkpoint."""
    cases = [{"text": TEXT, "max_new_tokens": FRAMES, **({"ref_text": REF_TEXT} if m.get("ref") else {}),
              **{k: v for k, v in m.items() if k in ("voice", "instructions")}} for m in MODES.values()]
    got = reference(stack["foreign_checkpoint"], "generate", {"ref_codes": ref_codes(stack, "foreign")},
                    json.dumps(cases))
    return {mode: got[f"codes_{i}"] for i, mode in enumerate(MODES)}


@pytest.mark.parametrize("mode", list(MODES))
def test_foreign_checkpoint_through_the_api_matches_the_reference(http, stack, foreign_reference, mode):
    from ttscore.runtime.families.breeze_tts_2.request import BreezeRequest

    m = MODES[mode]
    model = stack["models"]["foreign"]
    (codes,) = run_codes(model, [BreezeRequest(
        text=TEXT, voice=m.get("voice"), instructions=m.get("instructions"), max_new_tokens=FRAMES,
        ref_codes=ref_codes(stack, "foreign") if m.get("ref") else None, ref_text=REF_TEXT if m.get("ref") else None)])
    assert codes.shape[0] > 0
    np.testing.assert_array_equal(codes, foreign_reference[mode])
    want = offline(stack, m.get("voice", "S0"), m.get("instructions"), bool(m.get("ref")), key="foreign")
    for got in three_ways(http, body(stack, model=stack["names"]["foreign"], **mode_fields(stack, mode))):
        same_audio(got, want)


def test_uploaded_and_precomputed_voices_equal_ref_audio_with_ref_text(http, stack):
    """A stored voice is the reference codes + transcript: the same audio as ref_audio + ref_text."""
    want = offline(stack, ref=True)
    inline = wav_of(http.post(SPEECH, json=body(stack, **mode_fields(stack, "clone"))))
    same_audio(inline, want)
    e2e.upload_voice(http, stack["ref"], "breeze_told", REF_TEXT)
    e2e.upload_voice(http, stack["ref"], "breeze_untold")
    assert {"breeze_told", "breeze_untold", PRECOMPUTED} <= set(http.get("/v1/audio/voices").json()["voices"])
    for voice, extra in (("breeze_told", {}), ("breeze_untold", {"ref_text": REF_TEXT}), (PRECOMPUTED, {})):
        # the same codes; the streamed vocoder's float sums may differ by one 16-bit step between runs
        # (its chunk boundaries follow the engine's timing; streamed == whole within float error)
        got = wav_of(http.post(SPEECH, json=body(stack, voice=voice, **extra))).astype(np.int32)
        assert got.shape == inline.shape and np.max(np.abs(got - inline)) <= 1
        same_audio(e2e.streamed_pcm(http, body(stack, voice=voice, **extra)), want)
    directed = wav_of(http.post(SPEECH, json=body(stack, voice="breeze_told", instructions=DESIGN)))
    same_audio(directed, offline(stack, instructions=DESIGN, ref=True))
    # The foreign checkpoint has the same codec: the voices fit it too (its codes are its encoder's).
    got = wav_of(http.post(SPEECH, json=body(stack, model=stack["names"]["foreign"], voice="breeze_told")))
    same_audio(got, offline(stack, ref=True, key="foreign"))
    # Without a transcript (uploaded without one, none in the request) the voice cannot clone.
    e2e.assert_refused(http.post(SPEECH, json=body(stack, voice="breeze_untold")), "ref_text")
    assert http.delete("/v1/audio/voices/breeze_untold").status_code == 200


def test_voices_differ(stack):
    assert not np.array_equal(offline(stack, "S0"), offline(stack, "S3"))


def test_openai_sdk_against_its_id(stack):
    client = e2e.sdk(stack["url"])
    for model in (stack["breeze"], f"BreezeBlue/{stack['breeze']}"):
        samples = e2e.sdk_wav(client, 24000, model=model, voice="S3", input=TEXT, extra_body={"max_new_tokens": FRAMES})
        same_audio(samples, offline(stack, "S3"))
    pcm = e2e.sdk_pcm(client, {"max_new_tokens": FRAMES}, model=stack["breeze"], voice="S0", input=TEXT,
                      instructions=DESIGN)
    same_audio(pcm, offline(stack, "S0", DESIGN))
    foreign = stack["names"]["foreign"]
    for model in (foreign, f"BreezeBlue/{foreign}"):  # clone through the SDK's extra_body
        samples = e2e.sdk_wav(client, 24000, model=model, voice="S0", input=TEXT,
                              extra_body={"max_new_tokens": FRAMES, **mode_fields(stack, "clone")})
        same_audio(samples, offline(stack, ref=True, key="foreign"))


def websocket_audio(stack, config: dict) -> np.ndarray:
    return e2e.websocket_audio(stack["url"], {"max_new_tokens": FRAMES, **config}, TEXT)


def test_websocket_with_its_id(stack):
    got = websocket_audio(stack, {"model": stack["breeze"], "voice": "S2", "instructions": DESIGN})
    same_audio(got, offline(stack, "S2", DESIGN))
    got = websocket_audio(stack, {"model": stack["names"]["foreign"], **mode_fields(stack, "direction")})
    same_audio(got, offline(stack, instructions=DESIGN, ref=True, key="foreign"))


def test_one_request_of_each_family_in_flight_together(stack):
    stream = {"response_format": "pcm", "stream_format": "audio"}
    payloads = {
        "breeze": body(stack, **stream),
        "qwen": {"input": TEXT, "model": stack["names"]["qwen"], "voice": "vivian", "max_new_tokens": 12, **stream},
        "vox": {"input": TEXT, "model": stack["names"]["vox"], "max_new_tokens": 6, **stream},
    }
    assert e2e.in_flight_together(stack["url"], payloads) == {"breeze": 200, "qwen": 200, "vox": 200}


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"guidance_scale": 2.0}, "guidance_scale"),
        ({"cfg_scale": 2.0}, "cfg_scale"),
        ({"extra_params": {"guidance_scale": 2.0}}, "extra_params"),  # where vLLM-Omni reads it
        ({"extra_params": {"temperature": 0.7}}, "extra_params"),
        ({"negative_prompt": "noisy"}, "negative_prompt"),
        ({"temperature": 0.7}, "temperature"),
        ({"top_p": 0.9}, "top_p"),
        ({"top_k": 10}, "top_k"),
        ({"speaker_embedding": [0.1, 0.2]}, "speaker_embedding"),
        ({"language": "English"}, "language"),
        ({"x_vector_only_mode": True}, "x_vector_only_mode"),
        ({"non_streaming_mode": True}, "non_streaming_mode"),
        ({"ref_text": "A transcript without audio."}, "ref_text"),
        ({"voice": "S1", "ref_text": "A transcript without audio."}, "ref_text"),
        ({"ref_audio": "REF"}, "ref_text"),  # a reference without its transcript
        ({"ref_audio": "REF", "ref_text": "  "}, "ref_text"),
        ({"ref_audio": ["REF", "REF"], "ref_text": REF_TEXT}, "ref_audio"),  # more than one reference clip
        ({"ref_audio": "data:audio/wav;base64,AAAA", "ref_text": REF_TEXT}, "ref_audio"),
        ({"ref_audio": "REF", "ref_text": REF_TEXT, "language": "Chinese"}, "language"),
        ({"ref_audio": "REF", "ref_text": REF_TEXT, "sample_rate": 48000}, "sample_rate"),
        ({"sample_rate": 16000}, "sample_rate"),
        ({"speed": 1.5}, "speed"),
        ({"voice": "S10"}, "voice"),
        ({"voice": "alloy"}, "voice"),
        ({"task_type": "Clone"}, "task_type"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"input": "   "}, "input"),
    ],
)
def test_refused_field_is_a_400_naming_it(http, stack, extra, param):
    ref = data_url(stack["ref"])
    clip = extra.get("ref_audio")
    if clip is not None:  # "REF": the test's reference clip
        extra = {**extra, "ref_audio": [ref if c == "REF" else c for c in clip] if isinstance(clip, list)
                 else ref if clip == "REF" else clip}
    e2e.assert_refused(http.post(SPEECH, json=body(stack, **extra)), param)


def test_the_next_request_after_a_refusal_is_served(http, stack):
    e2e.assert_served_after_a_refusal(http, body(stack, max_new_tokens=0), body(stack), 24000)


def test_guidance_at_one_is_accepted_and_changes_nothing(http, stack):
    plain = wav_of(http.post(SPEECH, json=body(stack)))
    given = http.post(SPEECH, json=body(stack, extra_params={"guidance_scale": 1.0, "cfg_scale": 1.0}))
    assert given.status_code == 200, given.text
    got = wav_of(given).astype(np.int32)
    assert got.shape == plain.shape and np.max(np.abs(got - plain)) <= 1  # one 16-bit step, as above
