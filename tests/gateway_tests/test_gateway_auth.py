"""API keys (gateway.auth) over a fake Triton backend: every protected route answers 401 in OpenAI's
body without a key or with a wrong one and works with a right one; probes and metrics stay open;
the WebSocket takes the header or ?api_key= and refuses with an error message and close 1008; the
official openai SDK's `api_key=` just works; `python -m gateway` merges the config's keys,
TTS_API_KEYS and --api-key and never prints them.
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from fastapi.testclient import TestClient
from gateway_fixtures import FakeBackend, fake_deployment, start_gateway
from gateway_process import GatewayProcess, fake_config
from prometheus_text import sample, scrape
from starlette.websockets import WebSocketDisconnect
from voices_audio import wav

import gateway.app
from gateway.app import create_app
from gateway.auth import APIKeys
from gateway.settings import SettingsError
from ttscore.backend.triton_server import free_port

pytestmark = pytest.mark.gateway

KEYS = ("sk-first-key", "sk-second.key_2")
WS = "/v1/audio/speech/stream"


@pytest.fixture(scope="module")
def settings(tmp_path_factory):  # type: ignore[no-untyped-def]
    return fake_deployment(tmp_path_factory.mktemp("auth"), api_keys=list(KEYS))


@pytest.fixture
def client(settings):  # type: ignore[no-untyped-def]
    with TestClient(create_app(settings, backend_factory=lambda s: FakeBackend()), raise_server_exceptions=False) as c:
        yield c


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def assert_401(r: httpx.Response) -> str:
    assert r.status_code == 401, r.text
    assert r.headers["www-authenticate"] == "Bearer"
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["type"] == "invalid_request_error" and err["code"] == "invalid_api_key" and err["param"] is None
    assert not any(k in r.text for k in KEYS)
    return str(err["message"])


def upload_voice(client, name: str, headers: dict[str, str]) -> httpx.Response:  # type: ignore[no-untyped-def]
    return client.post("/v1/audio/voices", data={"name": name, "consent": "ok"},
                       files={"audio_sample": ("v.wav", wav(1.5), "audio/wav")}, headers=headers)


CALLS = {
    "speech": lambda c, h: c.post("/v1/audio/speech", json={"input": "Hi", "max_new_tokens": 2}, headers=h),
    "batch": lambda c, h: c.post("/v1/audio/speech/batch", json={"items": [{"input": "Hi"}], "max_new_tokens": 2},
                                 headers=h),
    "voices list": lambda c, h: c.get("/v1/audio/voices", headers=h),
    "voice upload": lambda c, h: upload_voice(c, "narrator", h),
    "models": lambda c, h: c.get("/v1/models", headers=h),
    "openapi": lambda c, h: c.get("/openapi.json", headers=h),
}


@pytest.mark.parametrize("call", CALLS.values(), ids=CALLS.keys())
def test_every_protected_route_needs_a_right_key(client, call) -> None:  # type: ignore[no-untyped-def]
    assert "Missing API key" in assert_401(call(client, {}))
    assert assert_401(call(client, bearer("sk-wrong"))) == "Incorrect API key provided"
    assert_401(call(client, {"Authorization": "Basic " + KEYS[0]}))  # only the Bearer scheme
    assert_401(call(client, bearer(KEYS[0] + "x")))
    assert_401(call(client, bearer(KEYS[0][:-1])))
    for key in KEYS:
        r = call(client, bearer(key))
        assert r.status_code == 200, r.text
    assert call(client, {"authorization": "bearer " + KEYS[1]}).status_code == 200  # the scheme is case-insensitive


def test_voice_delete_and_unknown_routes_need_a_key(client) -> None:  # type: ignore[no-untyped-def]
    assert upload_voice(client, "narrator", bearer(KEYS[0])).status_code == 200
    assert_401(client.delete("/v1/audio/voices/narrator"))
    assert_401(client.delete("/v1/audio/voices/narrator", headers=bearer("nope")))
    assert client.delete("/v1/audio/voices/narrator", headers=bearer(KEYS[1])).status_code == 200
    assert_401(client.get("/v1/nothing"))  # what exists is not revealed without a key
    assert client.get("/v1/nothing", headers=bearer(KEYS[0])).status_code == 404


def test_probes_and_metrics_are_open_and_count_the_refusals(client) -> None:  # type: ignore[no-untyped-def]
    assert client.get("/health").status_code == 200
    assert client.get("/ready").status_code == 200
    assert_401(client.post("/v1/audio/speech", json={"input": "Hi"}))
    s = scrape(client.get)
    assert sample(s, "tts_requests_total", route="/v1/audio/speech", status="401", model="none") == 1
    assert sample(s, "tts_errors_total", cause="AuthenticationError") == 1


def ws_refusal(client, url: str, headers: dict[str, str] | None = None) -> tuple[dict, int]:  # type: ignore[no-untyped-def]
    with client.websocket_connect(url, headers=headers or {}) as ws:
        message = ws.receive_json()
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_json()
    return message, closed.value.code


def ws_speaks(client, url: str, headers: dict[str, str] | None = None) -> None:  # type: ignore[no-untyped-def]
    with client.websocket_connect(url, headers=headers or {}) as ws:
        ws.send_json({"type": "session.config", "voice": "vivian", "max_new_tokens": 2})
        ws.send_json({"type": "input.text", "text": "Hello."})
        ws.send_json({"type": "input.done"})
        kinds = []
        while not kinds or kinds[-1] != "session.done":
            m = ws.receive()
            kinds.append(json.loads(m["text"])["type"] if m.get("text") else "audio")
        assert kinds == ["audio.start", "audio", "audio.done", "session.done"]
        ws.send_json({"type": "session.close"})


def test_websocket_takes_the_header_or_the_query_parameter(client) -> None:  # type: ignore[no-untyped-def]
    for headers, url in [({}, WS), (bearer("sk-wrong"), WS), ({}, WS + "?api_key=sk-wrong"), ({}, WS + "?api_key=")]:
        message, code = ws_refusal(client, url, headers)
        assert message["type"] == "error" and "API key" in message["message"]
        assert code == 1008  # policy violation
    ws_speaks(client, WS, bearer(KEYS[0]))
    ws_speaks(client, WS + f"?api_key={KEYS[1]}")
    ws_speaks(client, WS + "?voice=x&api_key=" + KEYS[0])
    s = scrape(client.get)
    assert sample(s, "tts_requests_total", route=WS, status="401", model="none") == 4


@pytest.mark.unit
def test_keys_match_exactly() -> None:
    keys = APIKeys(["sk-a?b", "k2"])
    assert keys.accepts("sk-a?b") and keys.accepts("k2")
    # (no lossy encoding: a character a codec would replace by "?" is not a "?")
    for wrong in ["sk-a€b", "sk-a\udcffb", "sk-a\u00ffb", "sk-a?", "sk-a?bb", "", "K2", " k2"]:
        assert not keys.accepts(wrong), wrong
    assert not APIKeys([])


def test_without_keys_nothing_is_asked(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with TestClient(create_app(fake_deployment(tmp_path), backend_factory=lambda s: FakeBackend())) as c:
        assert c.post("/v1/audio/speech", json={"input": "Hi", "max_new_tokens": 2}).status_code == 200
        assert c.post("/v1/audio/speech", json={"input": "Hi", "max_new_tokens": 2},
                      headers=bearer("anything")).status_code == 200


@pytest.mark.parametrize("keys", [["has space"], ["a,b"], [""], ["naïve"], "one-string", [1]])
def test_unusable_keys_fail_at_start_up_without_showing_them(tmp_path, keys) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SettingsError) as exc:
        fake_deployment(tmp_path, api_keys=keys)
    for key in keys if isinstance(keys, list) else [keys]:
        if isinstance(key, str) and key:
            assert key not in str(exc.value)


def test_the_openai_sdk_api_key_just_works(settings) -> None:  # type: ignore[no-untyped-def]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gateway.app, "_triton_backend", lambda s: (lambda url: FakeBackend()))
        port = free_port()
        server, thread = start_gateway(settings, port)
    try:
        base = f"http://127.0.0.1:{port}/v1"
        sdk = openai.OpenAI(base_url=base, api_key=KEYS[1], max_retries=0, timeout=30)
        audio = sdk.audio.speech.create(model="tiny-custom-voice", voice="vivian", input="Hello!",
                                        response_format="wav", extra_body={"max_new_tokens": 2})
        assert audio.content[:4] == b"RIFF"
        assert next(m.id for m in sdk.models.list()) == "tiny-custom-voice"
        wrong = openai.OpenAI(base_url=base, api_key="sk-wrong", max_retries=0, timeout=30)
        with pytest.raises(openai.AuthenticationError) as exc:
            wrong.audio.speech.create(model="tiny-custom-voice", voice="vivian", input="Hello!")
        assert exc.value.status_code == 401 and exc.value.code == "invalid_api_key"
    finally:
        server.should_exit = True
        thread.join(10)


def test_python_m_gateway_merges_config_environment_and_command_line_keys(tmp_path) -> None:  # type: ignore[no-untyped-def]
    config = fake_config(tmp_path, api_keys=["sk-config"])
    gw = GatewayProcess(config, tmp_path / "gateway.log", fake=True, args=("--api-key", "sk-cli"),
                        env={"TTS_API_KEYS": "sk-env-1, sk-env-2"}).start()
    try:
        for key in ("sk-config", "sk-env-1", "sk-env-2", "sk-cli"):
            assert httpx.get(gw.url + "/v1/models", headers=bearer(key), timeout=10).status_code == 200, key
        assert httpx.get(gw.url + "/v1/models", headers=bearer("sk-other"), timeout=10).status_code == 401
        assert httpx.get(gw.url + "/metrics", timeout=10).status_code == 200
    finally:
        gw.stop()
    log = gw.log_text()
    assert "API keys: 4 configured" in log
    assert not any(key in log for key in ("sk-config", "sk-env-1", "sk-env-2", "sk-cli"))
