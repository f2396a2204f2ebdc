"""The ElevenLabs dialect over the real stack (the session's e2e Triton deployment, tests/e2e_fixtures.py, behind
an in-process gateway with an API key): ElevenLabs' own Python SDK (`base_url` set to the gateway) gets audio from
`text_to_speech.convert`, `stream` and `convert_with_timestamps`; with a seed (the tiny CustomVoice checkpoint is
greedy) the dialect's audio equals the Speech API's for the same text and voice within 1 LSB; bad input gets
ElevenLabs' error shape and status, and the server keeps serving; the stream-input WebSocket speaks."""

from __future__ import annotations

import base64
import json

import httpx
import numpy as np
import pytest
from gateway_fixtures import start_gateway
from websockets.sync.client import connect

from gateway.settings import Settings
from ttscore.backend.triton_server import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TEXT = "Hello from the gateway."
FRAMES = 16
SEED = 7
KEY = "e2e-el-key"


@pytest.fixture(scope="module")
def stack(e2e_triton, tmp_path_factory):
    cfg = {**e2e_triton["config"], "speaker_samples_dir": str(tmp_path_factory.mktemp("el-speakers")),
           "health_interval_s": 0, "api_keys": [KEY]}
    port = free_port()
    gw, thread = start_gateway(Settings.from_dict(cfg), port)
    yield {"url": f"http://127.0.0.1:{port}", "model": e2e_triton["names"]["custom_voice"]}
    gw.should_exit = True
    thread.join(15)


@pytest.fixture(scope="module")
def sdk(stack):
    from elevenlabs import ElevenLabs

    return ElevenLabs(api_key=KEY, base_url=stack["url"], timeout=120)


def options(frames: int = FRAMES) -> dict:
    return {"additional_body_parameters": {"max_new_tokens": frames}}


def speech_api(stack, **body) -> bytes:
    r = httpx.post(f"{stack['url']}/v1/audio/speech", headers={"Authorization": f"Bearer {KEY}"}, timeout=120, json={
        "model": stack["model"], "voice": "vivian", "input": TEXT, "language": "English", "seed": SEED,
        "max_new_tokens": FRAMES, "response_format": "pcm", **body})
    assert r.status_code == 200, r.text
    return r.content


def samples(data: bytes) -> np.ndarray:
    return np.frombuffer(data, "<i2").astype(np.int32)


def assert_within_1_lsb(a: bytes, b: bytes) -> None:
    x, y = samples(a), samples(b)
    assert x.size == y.size and x.size > 0
    assert int(np.abs(x - y).max()) <= 1


def test_convert_equals_the_speech_api(stack, sdk):
    audio = b"".join(sdk.text_to_speech.convert(
        "vivian", text=TEXT, model_id=stack["model"], output_format="pcm_24000", language_code="en", seed=SEED,
        voice_settings={"stability": 0.3, "similarity_boost": 0.8}, request_options=options()))
    assert_within_1_lsb(audio, speech_api(stack))


def test_stream_equals_the_speech_api_stream(stack, sdk):
    chunks = list(sdk.text_to_speech.stream("vivian", text=TEXT, model_id=stack["model"], output_format="pcm_16000",
                                            language_code="en", seed=SEED, request_options=options()))
    assert len(chunks) >= 1
    assert_within_1_lsb(b"".join(chunks), speech_api(stack, sample_rate=16000, stream_format="audio"))


def test_convert_with_timestamps(stack, sdk):
    got = sdk.text_to_speech.convert_with_timestamps(
        "vivian", text=TEXT, model_id=stack["model"], output_format="pcm_24000", language_code="en", seed=SEED,
        request_options=options())
    assert_within_1_lsb(base64.b64decode(got.audio_base_64), speech_api(stack))
    assert got.alignment is None  # no word timings served in this deployment


def test_bad_input_gets_elevenlabs_errors_and_the_server_keeps_serving(stack, sdk):
    from elevenlabs import ElevenLabs
    from elevenlabs.core.api_error import ApiError

    with pytest.raises(ApiError) as err:
        b"".join(sdk.text_to_speech.convert("nobody", text=TEXT, model_id=stack["model"], request_options=options()))
    assert err.value.status_code == 404 and err.value.body["detail"]["status"] == "voice_not_found"
    with pytest.raises(ApiError) as err:
        b"".join(sdk.text_to_speech.convert("vivian", text=TEXT, output_format="wav_9", request_options=options()))
    assert err.value.status_code == 422
    with pytest.raises(ApiError) as err:
        b"".join(ElevenLabs(api_key="wrong", base_url=stack["url"]).text_to_speech.convert("vivian", text=TEXT))
    assert err.value.status_code == 401 and err.value.body["detail"]["status"] == "invalid_api_key"
    voices = sdk.voices.get_all()
    assert "vivian" in {v.voice_id for v in voices.voices}
    test_convert_equals_the_speech_api(stack, sdk)


def ws_messages(ws) -> tuple[list[dict], int | None]:
    out = []
    try:
        while True:
            out.append(json.loads(ws.recv(timeout=120)))
    except Exception as exc:  # the close
        rcvd = getattr(exc, "rcvd", None)
        return out, rcvd.code if rcvd is not None else None


def test_stream_input_websocket(stack):
    base = stack["url"].replace("http", "ws") + "/v1/text-to-speech/vivian"
    query = f"model_id={stack['model']}&output_format=pcm_24000&language_code=en&max_new_tokens={FRAMES}"
    with connect(f"{base}/stream-input?{query}", additional_headers={"xi-api-key": KEY}) as ws:
        ws.send(json.dumps({"text": " ", "voice_settings": {"stability": 0.5}}))
        ws.send(json.dumps({"text": "Hello from "}))
        ws.send(json.dumps({"text": "the gateway. ", "flush": True}))
        ws.send(json.dumps({"text": ""}))
        msgs, code = ws_messages(ws)
    assert code == 1000 and msgs[-1] == {"isFinal": True}
    audio = b"".join(base64.b64decode(m["audio"]) for m in msgs if m.get("audio"))
    assert len(audio) > 0 and len(audio) % 2 == 0
    with connect(f"{base}/stream-input?{query}") as ws:  # no key in the handshake, a malformed first message
        ws.send("{not json")
        msgs, code = ws_messages(ws)
    assert code == 1008 and msgs[-1]["error"] == "invalid_message"
    test_convert_equals_the_speech_api(stack, sdk=__import__("elevenlabs").ElevenLabs(api_key=KEY, base_url=stack["url"]))
