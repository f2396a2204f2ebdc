"""Precomputed OmniVoice voices through the whole stack (the session's shared deployment,
tests/e2e_fixtures.py, which serves two OmniVoice checkpoints with different codecs): `triton-tts
precompute-voice` writes the clip's codes (with and without a transcript) into a custom_voice_dir; a
gateway started with it lists them, and a request naming one equals the same request with the clip
as `ref_audio` and the transcript as `ref_text` (whole file and SSE stream), while the OmniVoice
checkpoint of another codec and a model of another family refuse the voice with a 400 naming `voice`.
"""

from __future__ import annotations

import argparse
import base64
import json

import httpx
import numpy as np
import pytest
import soundfile as sf
from gateway_fixtures import start_gateway

from gateway import encoding
from gateway.settings import Settings
from triton_tts.precompute import add_precompute_parser
from ttscore.backend.triton_server import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TEXT = "Hello from a precomputed voice. It has two sentences."
TRANSCRIPT = "A reference clip"
KNOBS = {"num_step": 8, "position_temperature": 0.0, "class_temperature": 0.0}
SPEECH = "/v1/audio/speech"
VOICES = {"omni_pre": TRANSCRIPT, "omni_pre_plain": None}


@pytest.fixture(scope="module")
def stack(e2e_triton, tmp_path_factory):
    work = tmp_path_factory.mktemp("omni-pre")
    ref = work / "ref.wav"
    t = np.arange(int(22050 * 1.4)) / 22050
    sf.write(ref, (0.3 * np.sin(2 * np.pi * 200 * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))).astype(np.float32),
             22050, subtype="FLOAT")
    voices = work / "voices"
    parser = argparse.ArgumentParser(prog="triton-tts")
    add_precompute_parser(parser.add_subparsers(dest="cmd", required=True))
    for name, transcript in VOICES.items():
        argv = ["precompute-voice", "--artifacts", str(e2e_triton["artifacts"]["omnivoice"]), "--voice-name", name,
                "--ref-audio", str(ref), "--output-dir", str(voices), "-q"]
        args = parser.parse_args(argv + (["--ref-text", transcript] if transcript else []))
        assert args.func(args) == 0
    cfg = {**e2e_triton["config"], "speaker_samples_dir": str(work / "speakers"), "health_interval_s": 0,
           "custom_voice_dir": str(voices)}
    port = free_port()
    gw, thread = start_gateway(Settings.from_dict(cfg), port)
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=300) as client:
        yield {"http": client, "names": e2e_triton["names"], "ref": ref}
    gw.should_exit = True
    thread.join(15)


def body(stack, **kw):
    return {"input": TEXT, "model": stack["names"]["omnivoice"], "extra_params": dict(KNOBS), **kw}


def whole_and_sse(http, request) -> tuple[np.ndarray, np.ndarray]:
    r = http.post(SPEECH, json=request)
    assert r.status_code == 200, r.text
    rate, whole = encoding.parse_wav(r.content)
    assert rate == 24000 and whole.size
    with http.stream("POST", SPEECH, json={**request, "response_format": "pcm", "stream": True}) as r:
        assert r.status_code == 200
        events = [json.loads(line[6:]) for line in "".join(r.iter_text()).splitlines() if line.startswith("data: ")]
    assert events[-1]["type"] == "speech.audio.done"
    sse = np.frombuffer(b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta"),
                        "<i2")
    return whole, sse


def test_the_voices_are_listed(stack):
    listed = stack["http"].get("/v1/audio/voices").json()["voices"]
    assert set(VOICES) <= set(listed)


@pytest.mark.parametrize("name", list(VOICES))
def test_a_precomputed_voice_equals_ref_audio_and_ref_text(stack, name):
    http = stack["http"]
    clip = "data:audio/wav;base64," + base64.b64encode(stack["ref"].read_bytes()).decode()
    transcript = VOICES[name]
    inline = body(stack, ref_audio=clip, **({"ref_text": transcript} if transcript else {}))
    want_whole, want_sse = whole_and_sse(http, inline)
    got_whole, got_sse = whole_and_sse(http, body(stack, voice=name))
    np.testing.assert_array_equal(got_whole, want_whole)
    np.testing.assert_array_equal(got_sse, want_sse)
    # with the voice design too, and not the auto voice
    design = {"instructions": "female, low pitch"}
    np.testing.assert_array_equal(whole_and_sse(http, body(stack, voice=name, **design))[0],
                                  whole_and_sse(http, {**inline, **design})[0])
    assert not np.array_equal(got_whole, whole_and_sse(http, body(stack))[0])


@pytest.mark.parametrize("model", ["omnivoice_foreign", "voxcpm2"])
def test_another_codec_or_family_refuses_the_voice_naming_voice(stack, model):
    request = {"input": TEXT, "model": stack["names"][model], "voice": "omni_pre"}
    r = stack["http"].post(SPEECH, json=request if model == "voxcpm2" else {**request, "extra_params": KNOBS})
    assert r.status_code == 400 and r.json()["error"]["param"] == "voice", r.text
