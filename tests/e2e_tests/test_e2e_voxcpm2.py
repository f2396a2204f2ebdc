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
import json
import threading

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf
from e2e_speech import SPEECH, data_url, same_audio, wav_at
from gateway_fixtures import start_gateway

from gateway import encoding
from gateway.settings import Settings
from ttscore.backend.triton_server import free_port
from ttscore.contract import tensors as triton_io
from ttscore.runtime.engine import Generator
from ttscore.runtime.families import FAMILIES

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TEXT = "Hello from VoxCPM2."
PATCHES = 6
SEED = 5


@pytest.fixture(scope="module")
def stack(e2e_triton, tmp_path_factory):
    cfg = {**e2e_triton["config"], "speaker_samples_dir": str(tmp_path_factory.mktemp("vox-speakers")),
           "health_interval_s": 0}
    port = free_port()
    gw, thread = start_gateway(Settings.from_dict(cfg), port)
    ref = tmp_path_factory.mktemp("vox-ref") / "ref.wav"
    t = np.arange(int(16000 * 1.2)) / 16000  # uploads need at least 1 s
    sf.write(ref, (0.3 * np.sin(2 * np.pi * 220 * t) * np.sin(2 * np.pi * 3 * t)).astype(np.float32), 16000,
             subtype="FLOAT")
    yield {"url": f"http://127.0.0.1:{port}", "names": e2e_triton["names"], "model": e2e_triton["pipelines"]["voxcpm2"],
           "vox": e2e_triton["names"]["voxcpm2"], "ref": ref}
    gw.should_exit = True
    thread.join(15)


def offline(stack, text=TEXT, ref_mode: str | None = None, ref_text: str | None = None) -> np.ndarray:
    """The offline engine with the tensors the gateway sends (the family's request_from_tensors)."""
    model = stack["model"]
    fields = {"text": text, "seed": SEED, "max_new_tokens": PATCHES}
    if ref_mode is not None:
        wav, sr = sf.read(stack["ref"], dtype="float32")
        fields["ref_patches"] = model.encode_reference(wav, sr, pad="left" if ref_mode == "prompt" else "right")
        fields["ref_text"] = ref_text
    request = FAMILIES["voxcpm2"].request_from_tensors(triton_io.request_tensors(**fields))
    return np.concatenate([e.pcm for e in Generator(model, max_batch=1, chunk_policy="fixed").synthesize(request)])




def body(stack, **kw):
    return {"input": TEXT, "model": stack["vox"], "seed": SEED, "max_new_tokens": PATCHES, **kw}


def wav_of(r) -> np.ndarray:
    return wav_at(r, 48000)


def test_models_card_shows_family_rate_and_voices(http, stack):
    cards = {m["id"]: m for m in http.get("/v1/models").json()["data"]}
    vox = cards[stack["vox"]]
    assert (vox["family"], vox["sample_rate"], vox["voices"]) == ("voxcpm2", 48000, [])
    assert cards[stack["names"]["custom_voice"]]["family"] == "qwen3_tts"
    assert cards[stack["names"]["custom_voice"]]["sample_rate"] == 24000


def test_sdk_against_each_model_id(stack):
    client = openai.OpenAI(base_url=stack["url"] + "/v1", api_key="none", max_retries=0, timeout=300)
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
            r = client.audio.speech.create(model=model, input=TEXT, response_format="wav", **kw)
            rate, samples = encoding.parse_wav(r.content)
            assert rate == (48000 if key == "voxcpm2" else 24000) and samples.size, (key, model)
            if key == "voxcpm2":
                same_audio(samples, offline(stack))
    # the SDK's raw PCM stream of VoxCPM2
    with client.audio.speech.with_streaming_response.create(
            model=stack["vox"], voice="default", input=TEXT, response_format="pcm",
            extra_body={"stream_format": "audio", "seed": SEED, "max_new_tokens": PATCHES}) as r:
        pcm = b"".join(r.iter_bytes())
    same_audio(np.frombuffer(pcm, "<i2"), offline(stack))


def test_whole_file_raw_stream_and_sse_are_the_same_48k_audio(http, stack):
    want = offline(stack)
    same_audio(wav_of(http.post(SPEECH, json=body(stack))), want)
    with http.stream("POST", SPEECH, json=body(stack, response_format="pcm", stream_format="audio")) as r:
        assert r.status_code == 200
        chunks = [c for c in r.iter_bytes() if c]
    assert len(chunks) > 1  # streamed as decoded
    same_audio(np.frombuffer(b"".join(chunks), "<i2"), want)
    with http.stream("POST", SPEECH, json=body(stack, response_format="pcm", stream=True)) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        text = "".join(r.iter_text())
    events = [json.loads(line[len("data: "):]) for line in text.splitlines() if line.startswith("data: ")]
    assert events[-1]["type"] == "speech.audio.done"
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
        with stack["ref"].open("rb") as f:
            r = http.post("/v1/audio/voices", files={"audio_sample": ("ref.wav", f, "audio/wav")},
                          data={"name": name, "consent": "ok", **({"ref_text": ref_text} if ref_text else {})})
        assert r.status_code == 200, r.text
        got = wav_of(http.post(SPEECH, json=body(stack, voice=name)))
        want = offline(stack, ref_mode="prompt" if ref_text else "reference", ref_text=ref_text)
        same_audio(got, want)
    assert {"vox_plain", "vox_told"} <= set(http.get("/v1/audio/voices").json()["voices"])


def test_websocket_with_a_voxcpm2_model(stack):
    from websockets.sync.client import connect

    ws_url = stack["url"].replace("http://", "ws://") + "/v1/audio/speech/stream"
    with connect(ws_url, open_timeout=30) as ws:
        ws.send(json.dumps({"type": "session.config", "model": stack["vox"], "seed": SEED,
                            "max_new_tokens": PATCHES, "response_format": "pcm"}))
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
    same_audio(np.frombuffer(audio, "<i2"), offline(stack))


def test_a_voxcpm2_and_a_qwen_request_in_flight_together(stack):
    results: dict[str, int] = {}

    def post(key, payload):
        with httpx.Client(base_url=stack["url"], timeout=300) as c:
            with c.stream("POST", SPEECH, json=payload) as r:
                results[key] = r.status_code
                b"".join(r.iter_bytes())

    threads = [
        threading.Thread(target=post, args=("vox", body(stack, response_format="pcm", stream_format="audio"))),
        threading.Thread(target=post, args=("qwen", {"input": TEXT, "model": stack["names"]["custom_voice"],
                                                     "voice": "vivian", "max_new_tokens": 12,
                                                     "response_format": "pcm", "stream_format": "audio"})),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert results == {"vox": 200, "qwen": 200}


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
    r = http.post(SPEECH, json=body(stack, **extra))
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.json()
    assert wav_of(http.post(SPEECH, json=body(stack))).size
