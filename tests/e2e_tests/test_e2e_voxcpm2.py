"""VoxCPM2 through the whole stack, in the session's mixed deployment (Qwen3-TTS CustomVoice,
VoiceDesign, Base + VoxCPM2; tests/e2e_fixtures.py): the gateway routes by `model`, speaks 48 kHz
through every response format and `sample_rate`, streams raw and SSE, clones from `ref_audio`
(+ `ref_text`) and from an uploaded voice (its patches computed at upload), works over the WebSocket
and with the openai SDK against each model id, and refuses what VoxCPM2 does not take with a 400
naming the field while the server keeps serving. Audio equals the offline engine within one 16-bit step.
"""

from __future__ import annotations

import base64
import io

import e2e_speech as e2e
import numpy as np
import pytest
import soundfile as sf
from e2e_speech import SPEECH, data_url, same_audio, wav_at

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TEXT = "Hello from VoxCPM2."
PATCHES = 6
SEED = 5


@pytest.fixture(scope="module")
def stack(e2e_triton, tmp_path_factory):
    ref = tmp_path_factory.mktemp("vox-ref") / "ref.wav"
    e2e.write_tone(ref, 16000, 1.2, floor=0)
    with e2e.family_stack(e2e_triton, tmp_path_factory, "voxcpm2", "vox", ref=ref) as stack:
        yield stack


def offline(stack, text=TEXT, ref_mode: str | None = None, ref_text: str | None = None) -> np.ndarray:
    """The offline engine with the tensors the gateway sends (the family's request_from_tensors)."""
    model = stack["model"]
    fields = {"text": text, "seed": SEED, "max_new_tokens": PATCHES}
    if ref_mode is not None:
        wav, sr = sf.read(stack["ref"], dtype="float32")
        fields["ref_patches"] = model.encode_reference(wav, sr, pad="left" if ref_mode == "prompt" else "right")
        fields["ref_text"] = ref_text
    return e2e.offline_audio(model, "voxcpm2", **fields)[0]




def body(stack, **kw):
    return {"input": TEXT, "model": stack["vox"], "seed": SEED, "max_new_tokens": PATCHES, **kw}


def wav_of(r) -> np.ndarray:
    return wav_at(r, 48000)


def test_models_card_shows_family_rate_and_voices(http, stack):
    cards = e2e.model_cards(http)
    vox = cards[stack["vox"]]
    assert (vox["family"], vox["sample_rate"], vox["voices"]) == ("voxcpm2", 48000, [])
    assert cards[stack["names"]["custom_voice"]]["family"] == "qwen3_tts"
    assert cards[stack["names"]["custom_voice"]]["sample_rate"] == 24000


def test_sdk_against_each_model_id(stack):
    client = e2e.sdk(stack["url"])
    ref = data_url(stack["ref"])
    calls = {
        "custom_voice": dict(voice="vivian", extra_body={"max_new_tokens": 4}),
        "voice_design": dict(voice="ignored", extra_body={"task_type": "VoiceDesign", "instructions": "Calm.",
                                                          "max_new_tokens": 4}),
        "base": dict(voice="ignored", extra_body={"ref_audio": ref, "x_vector_only_mode": True, "max_new_tokens": 4}),
        "voxcpm2": dict(voice="default", extra_body={"seed": SEED, "max_new_tokens": PATCHES}),
    }
    for key, kw in calls.items():
        for model in (stack["names"][key], f"{'openbmb' if key == 'voxcpm2' else 'Qwen'}/{stack['names'][key]}"):
            samples = e2e.sdk_wav(client, 48000 if key == "voxcpm2" else 24000, model=model, input=TEXT, **kw)
            assert samples.size, (key, model)
            if key == "voxcpm2":
                same_audio(samples, offline(stack))
    # the SDK's raw PCM stream of VoxCPM2
    pcm = e2e.sdk_pcm(client, {"seed": SEED, "max_new_tokens": PATCHES}, model=stack["vox"], voice="default",
                      input=TEXT)
    same_audio(pcm, offline(stack))


def test_whole_file_raw_stream_and_sse_are_the_same_48k_audio(http, stack):
    want = offline(stack)
    same_audio(wav_of(http.post(SPEECH, json=body(stack))), want)
    with http.stream("POST", SPEECH, json=body(stack, response_format="pcm", stream_format="audio")) as r:
        assert r.status_code == 200
        chunks = [c for c in r.iter_bytes() if c]
    assert len(chunks) > 1  # streamed as decoded
    same_audio(np.frombuffer(b"".join(chunks), "<i2"), want)
    with http.stream("POST", SPEECH, json=body(stack, response_format="pcm", stream=True)) as r:
        events = e2e.sse_events(r)
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    same_audio(np.frombuffer(pcm, "<i2"), want)
    assert events[-1]["usage"]["output_tokens"] == PATCHES


@pytest.mark.parametrize(("fmt", "rate"), [("opus", None), ("opus", 24000), ("mp3", None), ("flac", None),
                                           ("aac", None), ("wav", 16000), ("pcm", 8000)])
def test_every_format_and_sample_rate(http, stack, fmt, rate):
    import av

    r = http.post(SPEECH, json=body(stack, response_format=fmt, **({"sample_rate": rate} if rate else {})))
    assert r.status_code == 200, r.text
    want_rate = rate or 48000
    seconds = offline(stack).size / 48000
    if fmt == "pcm":
        n, got_rate = len(r.content) // 2, want_rate
    else:
        with av.open(io.BytesIO(r.content)) as c:
            s = c.streams.audio[0]
            n, got_rate = sum(f.samples for f in c.decode(s)), int(s.sample_rate)
    # An Ogg Opus stream always decodes at 48 kHz (the encoded rate is only a header hint).
    assert got_rate == (48000 if fmt == "opus" else want_rate)
    assert abs(n / got_rate - seconds) < 0.1  # codec priming/padding only


def test_cloning_from_ref_audio_with_and_without_ref_text(http, stack):
    ref = data_url(stack["ref"])
    same_audio(wav_of(http.post(SPEECH, json=body(stack, ref_audio=ref))), offline(stack, ref_mode="reference"))
    got = wav_of(http.post(SPEECH, json=body(stack, ref_audio=ref, ref_text="A reference clip.")))
    same_audio(got, offline(stack, ref_mode="prompt", ref_text="A reference clip."))


def test_uploaded_voice_clones_with_its_patches(http, stack):
    for name, ref_text in (("vox_plain", None), ("vox_told", "A reference clip.")):
        e2e.upload_voice(http, stack["ref"], name, ref_text)
        got = wav_of(http.post(SPEECH, json=body(stack, voice=name)))
        want = offline(stack, ref_mode="prompt" if ref_text else "reference", ref_text=ref_text)
        same_audio(got, want)
    assert {"vox_plain", "vox_told"} <= set(http.get("/v1/audio/voices").json()["voices"])


def test_websocket_with_a_voxcpm2_model(stack):
    config = {"model": stack["vox"], "seed": SEED, "max_new_tokens": PATCHES}
    same_audio(e2e.websocket_audio(stack["url"], config, TEXT), offline(stack))


def test_a_voxcpm2_and_a_qwen_request_in_flight_together(stack):
    stream = {"response_format": "pcm", "stream_format": "audio"}
    payloads = {"vox": body(stack, **stream),
                "qwen": {"input": TEXT, "model": stack["names"]["custom_voice"], "voice": "vivian",
                         "max_new_tokens": 12, **stream}}
    assert e2e.in_flight_together(stack["url"], payloads) == {"vox": 200, "qwen": 200}


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"instructions": "Speak softly."}, "instructions"),
        ({"language": "English"}, "language"),
        ({"x_vector_only_mode": True}, "x_vector_only_mode"),
        ({"non_streaming_mode": True}, "non_streaming_mode"),
        ({"task_type": "CustomVoice"}, "task_type"),
        ({"voice": "vivian"}, "voice"),
        ({"ref_text": "A transcript without audio."}, "ref_text"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"response_format": "opus", "sample_rate": 44100}, "sample_rate"),
        ({"ref_audio": "data:audio/wav;base64,AAAA"}, "ref_audio"),
        ({"input": "   "}, "input"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_the_server_keeps_serving(http, stack, extra, param):
    e2e.assert_refused(http.post(SPEECH, json=body(stack, **extra)), param)
    assert wav_of(http.post(SPEECH, json=body(stack))).size
