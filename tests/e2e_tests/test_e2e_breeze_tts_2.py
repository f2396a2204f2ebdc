"""Breeze-TTS-2 through the whole stack, served next to Qwen3-TTS and VoxCPM2: its own deployment of
three tiny checkpoints (a greedy Qwen3-TTS CustomVoice, VoxCPM2, Breeze-TTS-2) rendered as
`triton-tts serve` renders it, so the session's shared mixed deployment keeps its start-up time.
/v1/models lists it; plain (`voice` S0..S9) and design (`instructions`) audio through the raw stream,
SSE, the whole file, the openai SDK and the WebSocket equals the offline engine's within one 16-bit
step; every refused field is a 400 naming it and the next request succeeds; one request of each
family in flight together.
"""

from __future__ import annotations

import base64
import json
import threading

import httpx
import numpy as np
import openai
import pytest
from gateway_fixtures import render_stack_repository, start_gateway

from gateway import encoding
from gateway.settings import Settings
from ttscore.backend.launcher import free_port
from ttscore.contract import tensors as triton_io
from ttscore.runtime.engine import Generator
from ttscore.runtime.families import FAMILIES, load_model

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TEXT = "Hello from Breeze."
FRAMES = 6
SPEECH = "/v1/audio/speech"
DESIGN = "A calm, low voice."


@pytest.fixture(scope="module")
def stack(triton_server, tmp_path_factory, tiny_custom_voice_greedy, voxcpm2_tiny, voxcpm2_artifacts,
          breeze_tiny, breeze_export):
    work = tmp_path_factory.mktemp("e2e-breeze")
    pairs = [tiny_custom_voice_greedy[:2], (voxcpm2_tiny, voxcpm2_artifacts), (breeze_tiny, breeze_export)]
    repo, cfg = render_stack_repository(work, pairs, max_active=2)
    server = triton_server(repo, ready_timeout_s=180)
    cfg = {**cfg, "triton_url": server.grpc_url, "health_interval_s": 0,
           "speaker_samples_dir": str(tmp_path_factory.mktemp("breeze-speakers"))}
    names = dict(zip(("qwen", "vox", "breeze"), (m["name"] for m in cfg["models"]), strict=True))
    port = free_port()
    gw, thread = start_gateway(Settings.from_dict(cfg), port)
    yield {"url": f"http://127.0.0.1:{port}", "names": names, "breeze": names["breeze"],
           "model": load_model(breeze_export)}
    gw.should_exit = True
    thread.join(15)


@pytest.fixture(scope="module")
def http(stack):
    with httpx.Client(base_url=stack["url"], timeout=300) as c:
        yield c


def offline(stack, voice: str = "S0", instructions: str | None = None) -> np.ndarray:
    """The offline engine with the tensors the gateway sends (the family's request_from_tensors)."""
    tensors = triton_io.request_tensors(text=TEXT, speaker=voice, instructions=instructions, max_new_tokens=FRAMES)
    request = FAMILIES["breeze_tts_2"].request_from_tensors(tensors)
    gen = Generator(stack["model"], max_batch=1, chunk_policy="fixed")
    return np.concatenate([e.pcm for e in gen.synthesize(request)])


def assert_same_audio(got_int16: np.ndarray, want_float: np.ndarray) -> None:
    want = encoding.to_int16(want_float).astype(np.int32)
    assert got_int16.shape == want.shape, (got_int16.shape, want.shape)
    assert want.size and np.max(np.abs(got_int16.astype(np.int32) - want)) <= 1


def body(stack, **kw):
    return {"input": TEXT, "model": stack["breeze"], "max_new_tokens": FRAMES, **kw}


def wav_of(r) -> np.ndarray:
    assert r.status_code == 200, r.text
    rate, samples = encoding.parse_wav(r.content)
    assert rate == 24000
    return samples


def test_models_lists_it_with_family_and_rate(http, stack):
    cards = {m["id"]: m for m in http.get("/v1/models").json()["data"]}
    card = cards[stack["breeze"]]
    assert (card["family"], card["sample_rate"]) == ("breeze_tts_2", 24000)
    assert {cards[stack["names"]["qwen"]]["family"], cards[stack["names"]["vox"]]["family"]} == {"qwen3_tts", "voxcpm2"}


@pytest.mark.parametrize(("voice", "instructions"), [(None, None), ("S3", None), ("S0", DESIGN)])
def test_whole_file_raw_stream_and_sse_equal_the_offline_engine(http, stack, voice, instructions):
    want = offline(stack, voice or "S0", instructions)
    extra = {k: v for k, v in (("voice", voice), ("instructions", instructions)) if v is not None}
    assert_same_audio(wav_of(http.post(SPEECH, json=body(stack, **extra))), want)
    with http.stream("POST", SPEECH, json=body(stack, response_format="pcm", stream_format="audio", **extra)) as r:
        assert r.status_code == 200
        pcm = b"".join(r.iter_bytes())
    assert_same_audio(np.frombuffer(pcm, "<i2"), want)
    with http.stream("POST", SPEECH, json=body(stack, response_format="pcm", stream=True, **extra)) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        text = "".join(r.iter_text())
    events = [json.loads(line[len("data: "):]) for line in text.splitlines() if line.startswith("data: ")]
    assert events[-1]["type"] == "speech.audio.done"
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    assert_same_audio(np.frombuffer(pcm, "<i2"), want)


def test_voices_differ(stack):
    assert not np.array_equal(offline(stack, "S0"), offline(stack, "S3"))


def test_openai_sdk_against_its_id(stack):
    client = openai.OpenAI(base_url=stack["url"] + "/v1", api_key="none", max_retries=0, timeout=300)
    for model in (stack["breeze"], f"BreezeBlue/{stack['breeze']}"):
        r = client.audio.speech.create(model=model, voice="S3", input=TEXT, response_format="wav",
                                       extra_body={"max_new_tokens": FRAMES})
        rate, samples = encoding.parse_wav(r.content)
        assert rate == 24000
        assert_same_audio(samples, offline(stack, "S3"))
    with client.audio.speech.with_streaming_response.create(
            model=stack["breeze"], voice="S0", input=TEXT, response_format="pcm", instructions=DESIGN,
            extra_body={"stream_format": "audio", "max_new_tokens": FRAMES}) as r:
        pcm = b"".join(r.iter_bytes())
    assert_same_audio(np.frombuffer(pcm, "<i2"), offline(stack, "S0", DESIGN))


def test_websocket_with_its_id(stack):
    from websockets.sync.client import connect

    ws_url = stack["url"].replace("http://", "ws://") + "/v1/audio/speech/stream"
    with connect(ws_url, open_timeout=30) as ws:
        ws.send(json.dumps({"type": "session.config", "model": stack["breeze"], "voice": "S2",
                            "instructions": DESIGN, "max_new_tokens": FRAMES, "response_format": "pcm"}))
        ws.send(json.dumps({"type": "input.text", "text": TEXT}))
        ws.send(json.dumps({"type": "input.done"}))
        audio, done = b"", None
        while done is None:
            m = ws.recv(timeout=300)
            if isinstance(m, bytes):
                audio += m
            elif json.loads(m)["type"] == "session.done":
                done = json.loads(m)
            else:
                assert json.loads(m)["type"] != "error", m
    assert_same_audio(np.frombuffer(audio, "<i2"), offline(stack, "S2", DESIGN))


def test_one_request_of_each_family_in_flight_together(stack):
    results: dict[str, int] = {}

    def post(key, payload):
        with httpx.Client(base_url=stack["url"], timeout=300) as c:
            with c.stream("POST", SPEECH, json=payload) as r:
                results[key] = r.status_code
                b"".join(r.iter_bytes())

    stream = {"response_format": "pcm", "stream_format": "audio"}
    payloads = {
        "breeze": body(stack, **stream),
        "qwen": {"input": TEXT, "model": stack["names"]["qwen"], "voice": "vivian", "max_new_tokens": 12, **stream},
        "vox": {"input": TEXT, "model": stack["names"]["vox"], "max_new_tokens": 6, **stream},
    }
    threads = [threading.Thread(target=post, args=item) for item in payloads.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert results == {"breeze": 200, "qwen": 200, "vox": 200}


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"guidance_scale": 2.0}, "guidance_scale"),
        ({"cfg_scale": 2.0}, "cfg_scale"),
        ({"negative_prompt": "noisy"}, "negative_prompt"),
        ({"temperature": 0.7}, "temperature"),
        ({"top_p": 0.9}, "top_p"),
        ({"top_k": 10}, "top_k"),
        ({"speaker_embedding": [0.1, 0.2]}, "speaker_embedding"),
        ({"language": "English"}, "language"),
        ({"x_vector_only_mode": True}, "x_vector_only_mode"),
        ({"non_streaming_mode": True}, "non_streaming_mode"),
        ({"ref_text": "A transcript without audio."}, "ref_text"),
        ({"ref_audio": "data:audio/wav;base64,AAAA"}, "ref_audio"),
        ({"sample_rate": 16000}, "sample_rate"),
        ({"speed": 1.5}, "speed"),
        ({"voice": "S10"}, "voice"),
        ({"voice": "alloy"}, "voice"),
        ({"task_type": "Clone"}, "task_type"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"input": "   "}, "input"),
    ],
)
def test_refused_field_is_a_400_naming_it_and_the_next_request_succeeds(http, stack, extra, param):
    r = http.post(SPEECH, json=body(stack, **extra))
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.json()
    assert wav_of(http.post(SPEECH, json=body(stack))).size
