"""End to end, voices: the real Triton deployment (tests/e2e_fixtures.py: greedy CustomVoice, VoiceDesign
and greedy Base) behind the real gateway *process* (`python -m gateway`, as `triton-tts serve` runs it,
with --custom-voice-dir and --allowed-local-media-path), driven with httpx, curl and a WebSocket client.

- speaking with an uploaded voice (with and without ref_text), with inline ref_audio + ref_text
  (data URL and file://) and with a precomputed voice (`triton-tts precompute-voice`) is the audio
  `triton-tts say` makes with that reference (16-bit: within 1 LSB);
- voices survive a gateway restart; a SIGKILL mid-upload leaves no trace; delete then speak is 400;
- every bad input gets its error and leaves the server and the other voices unharmed;
- the WebSocket as a client drives it: two utterances on one connection, sentence splitting, streamed
  PCM chunks (the same audio again), sticky and changed config, errors, idle timeout;
- every curl example of the spec's voice sections works, in document order.
"""

from __future__ import annotations

import io
import json
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf
from gateway_process import GatewayProcess
from voices_audio import tone

from gateway import encoding, refaudio
from ttscore.runtime.audio import load_audio
from ttscore.runtime.engine import Generator
from ttscore.runtime.families.qwen3_tts.request import Qwen3TTSRequest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TEXT = "Hello from the gateway."
REF_TEXT = "The exact transcript of the audio sample."
FRAMES = 16
SEED = 7
IDLE_S = 3
SPEC = Path(__file__).resolve().parents[3] / "shared" / "spec" / "speech_api.md"
VOICES = "/v1/audio/voices"
SPEECH = "/v1/audio/speech"


@pytest.fixture(scope="module")
def stack(e2e_triton, tmp_path_factory):
    work = tmp_path_factory.mktemp("e2e-voices")
    speakers, media, custom = work / "speakers", work / "media", work / "custom_voices"
    media.mkdir()
    ref = media / "voice_sample.wav"
    sf.write(ref, tone(2.0, 24000, freq=180.0), 24000, subtype="PCM_16")
    (media / "notes.txt").write_text("not audio\n")
    # the precompute-voice command, as a user runs it, on the served Base checkpoint's artifacts
    done = subprocess.run(
        [sys.executable, "-m", "triton_tts.cli", "precompute-voice", "--artifacts", str(e2e_triton["artifacts"]["base"]),
         "--voice-name", "alice", "--ref-audio", str(ref), "--ref-text", REF_TEXT, "--mode", "icl",
         "--output-dir", str(custom)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    cfg = {**e2e_triton["config"], "ws_idle_timeout_s": IDLE_S}
    (work / "gateway.json").write_text(json.dumps(cfg))
    gw = GatewayProcess(work / "gateway.json", work / "gateway.log", env={"SPEAKER_SAMPLES_DIR": str(speakers)},
                        args=("--log-level", "warning", "--custom-voice-dir", str(custom),
                              "--allowed-local-media-path", str(media)))
    gw.start()
    yield {"gw": gw, "url": gw.url, "ref": ref, "media": media, "speakers": speakers, "work": work,
           "pipeline": e2e_triton["pipelines"]["base"], "artifacts": e2e_triton["artifacts"]["base"],
           "names": e2e_triton["names"]}
    gw.stop()


@pytest.fixture(scope="module")
def http(stack):
    with httpx.Client(base_url=stack["url"], timeout=300) as c:
        yield c


def upload(http, name, path: Path, ref_text: str | None = None, **extra):
    data = {"name": name, "consent": "user_consent_id", **({"ref_text": ref_text} if ref_text else {}), **extra}
    with open(path, "rb") as f:
        return http.post(VOICES, data=data, files={"audio_sample": (path.name, f, "audio/wav")})


@pytest.fixture(scope="module")
def narrator(stack, http):
    """An uploaded voice with a transcript (in-context cloning) and one without (x-vector only)."""
    assert upload(http, "narrator", stack["ref"], REF_TEXT).status_code == 200
    assert upload(http, "plain", stack["ref"]).status_code == 200
    return "narrator"


def speak(http, **body) -> np.ndarray:
    r = http.post(SPEECH, json={"input": TEXT, "language": "English", "seed": SEED, "max_new_tokens": FRAMES, **body})
    assert r.status_code == 200, r.text
    rate, samples = encoding.parse_wav(r.content)
    assert rate == 24000
    return samples


def offline(stack, text=TEXT, ref_text: str | None = REF_TEXT, x_vector_only=False) -> np.ndarray:
    """What `triton-tts say --ref-audio ref.wav [--ref-text T | --x-vector-only] --greedy` makes."""
    pipe = stack["pipeline"]
    wav, sr = load_audio(stack["ref"].read_bytes())
    x_vector, ref_codes = pipe.voice_features(wav, sr, with_codes=not x_vector_only)
    req = Qwen3TTSRequest(text=text, language="English", ref_text=None if x_vector_only else ref_text,
                           ref_codes=ref_codes, x_vector=x_vector, x_vector_only=x_vector_only, seed=SEED,
                           max_new_tokens=FRAMES, do_sample=False, subtalker_do_sample=False)
    return np.concatenate([ev.pcm for ev in Generator(pipe, max_batch=1).synthesize(req)])


def assert_same_audio(got: np.ndarray, want_float: np.ndarray) -> None:
    assert np.abs(want_float).max() > 0.01  # real audio, not silence
    want = encoding.to_int16(want_float).astype(np.int32)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert np.max(np.abs(got.astype(np.int32) - want)) <= 1


def voice_names(http) -> list[str]:
    return [v["name"] for v in http.get(VOICES).json()["uploaded_voices"]]


def speaker_files(stack) -> list[str]:
    return sorted(p.name for p in stack["speakers"].iterdir())


# --- same audio as `triton-tts say` with that reference --------------------------------------------------


def test_uploaded_voice_with_ref_text_is_the_say_audio(stack, http, narrator, tmp_path):
    got = speak(http, voice="narrator")
    out = tmp_path / "say.wav"
    cmd = [sys.executable, "-m", "triton_tts.cli", "say", "--artifacts", str(stack["artifacts"]), "--ref-audio",
           str(stack["ref"]), "--ref-text", REF_TEXT, "--language", "English", "--seed", str(SEED), "--greedy",
           "--max-new-tokens", str(FRAMES), "-o", str(out), TEXT]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    said, rate = sf.read(out, dtype="int16")
    assert rate == 24000 and said.shape == got.shape
    assert np.max(np.abs(said.astype(np.int32) - got.astype(np.int32))) <= 1
    assert_same_audio(got, offline(stack))


def test_uploaded_voice_without_ref_text_is_the_x_vector_only_audio(stack, http, narrator):
    r = http.post(SPEECH, json={"input": TEXT, "voice": "plain", "language": "English", "seed": SEED,
                                "max_new_tokens": FRAMES})
    assert r.status_code == 200 and r.headers["x-vllm-omni-input-audio-tokens"] == "0"
    assert_same_audio(encoding.parse_wav(r.content)[1], offline(stack, x_vector_only=True))
    # an in-context voice asked for x-vector-only cloning gives the same
    assert_same_audio(speak(http, voice="narrator", x_vector_only_mode=True), offline(stack, x_vector_only=True))


def test_inline_ref_audio_is_the_say_audio(stack, http):
    want = offline(stack)
    data_url = refaudio.data_url(stack["ref"].read_bytes())
    assert_same_audio(speak(http, ref_audio=data_url, ref_text=REF_TEXT), want)
    assert_same_audio(speak(http, ref_audio=stack["ref"].as_uri(), ref_text=REF_TEXT), want)


def test_precomputed_voice_is_listed_and_is_the_say_audio(stack, http):
    listing = http.get(VOICES).json()
    assert "alice" in listing["voices"] and "alice" not in [v["name"] for v in listing["uploaded_voices"]]
    assert_same_audio(speak(http, voice="alice"), offline(stack))


# --- persistence ----------------------------------------------------------------------------------


def test_voices_survive_a_restart(stack, http, narrator):
    before = speak(http, voice="narrator")
    stack["gw"].stop()
    stack["gw"].start()
    assert {"narrator", "plain"} <= set(voice_names(http))
    # Same voice, same seed; the adaptive chunk schedule may round differently (at most one 16-bit step).
    assert np.abs(speak(http, voice="narrator").astype(np.int32) - before).max() <= 1


def test_a_killed_upload_leaves_no_trace(stack, http, narrator):
    files_before, names_before = speaker_files(stack), voice_names(http)
    boundary = "killedUpload"
    audio = stack["ref"].read_bytes()
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\nghost\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"consent\"\r\n\r\nc\r\n"
            f"--{boundary}\r\nContent-Disposition: form-data; name=\"audio_sample\"; filename=\"g.wav\"\r\n"
            f"Content-Type: audio/wav\r\n\r\n").encode() + audio + f"\r\n--{boundary}--\r\n".encode()
    sock = socket.create_connection(("127.0.0.1", stack["gw"].port), timeout=10)
    sock.sendall(f"POST {VOICES} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
                 f"Content-Type: multipart/form-data; boundary={boundary}\r\n\r\n".encode())
    sock.sendall(body[: len(body) // 2])
    time.sleep(0.5)  # the gateway is reading the body
    stack["gw"].stop(signal.SIGKILL)
    sock.close()
    stack["gw"].start()
    assert voice_names(http) == names_before and "ghost" not in http.get(VOICES).json()["voices"]
    assert speaker_files(stack) == files_before  # no voice file, no temp file
    r = http.post(SPEECH, json={"input": "Hi", "voice": "ghost"})
    assert r.status_code == 400


def test_delete_then_speak_is_400(stack, http):
    assert upload(http, "short_lived", stack["ref"], REF_TEXT).status_code == 200
    speak(http, voice="short_lived")
    r = http.delete(f"{VOICES}/short_lived")
    assert r.status_code == 200 and r.json() == {"success": True, "message": "Voice 'short_lived' deleted successfully"}
    r = http.post(SPEECH, json={"input": TEXT, "voice": "short_lived"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "voice"
    assert "short_lived.safetensors" not in speaker_files(stack)


# --- bad input ----------------------------------------------------------------------------------------


def test_bad_uploads_and_references_get_clear_errors(stack, http, narrator, tmp_path):
    files_before = speaker_files(stack)

    def bad(r, param, fragment):
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["param"] == param and fragment in err["message"], err

    big = tmp_path / "big.wav"
    big.write_bytes(b"RIFF" + b"\0" * (11 * 1024 * 1024))
    bad(upload(http, "big", big), "audio_sample", "exceeds maximum limit of 10MB")
    fake_wav = tmp_path / "fake.wav"
    fake_wav.write_text("definitely not audio")
    bad(upload(http, "fake", fake_wav), "audio_sample", "not a supported audio file")
    long = tmp_path / "long.wav"
    sf.write(long, tone(40.0, 8000), 8000, subtype="PCM_16")
    bad(upload(http, "long", long), "audio_sample", "too long")
    with open(stack["ref"], "rb") as f:
        audio = f.read()
    files = {"audio_sample": ("v.wav", audio, "audio/wav")}
    bad(http.post(VOICES, data={"name": "noconsent"}, files=files), "consent", "required")
    bad(http.post(VOICES, data={"consent": "c"}, files=files), "name", "required")
    bad(http.post(VOICES, data={"name": "../escape", "consent": "c"}, files=files), "name", "path separators")
    bad(http.post(VOICES, data={"name": "bell\x07", "consent": "c"}, files=files), "name", "control")
    bad(http.post(VOICES, data={"name": "vivian", "consent": "c"}, files=files), "name", "built-in")
    bad(http.post(VOICES, data={"name": "alice", "consent": "c"}, files=files), "name", "precomputed")
    r = http.delete(f"{VOICES}/unknown_voice")
    assert r.status_code == 404 and r.json() == {"success": False, "error": "Voice 'unknown_voice' not found"}
    # ref_audio: private addresses, non-audio, outside the allowed directory
    for ref, fragment in [(f"{stack['url']}/health", "non-public address"),
                          ("http://169.254.169.254/latest/meta-data/", "non-public address"),
                          ((stack["media"] / "notes.txt").as_uri(), "not a supported audio file"),
                          ("file:///etc/passwd", "outside the allowed local media directory")]:
        bad(http.post(SPEECH, json={"input": "Hi", "ref_audio": ref, "ref_text": "t"}), "ref_audio", fragment)
    # nothing stored, the server and the other voices unharmed
    assert speaker_files(stack) == files_before
    assert {"narrator", "plain"} <= set(voice_names(http))
    assert_same_audio(speak(http, voice="narrator"), offline(stack))


# --- WebSocket ---------------------------------------------------------------------------------------------


def ws_collect(ws, until="session.done"):
    out = []
    while True:
        m = ws.recv(timeout=120)
        m = json.loads(m) if isinstance(m, str) else m
        out.append(m)
        if isinstance(m, dict) and m["type"] == until:
            return out


def ws_requests(messages):
    reqs = []
    for m in messages:
        if isinstance(m, bytes):
            reqs[-1]["audio"] += m
            reqs[-1]["chunks"] += 1
        elif m["type"] == "audio.start":
            reqs.append({"start": m, "audio": b"", "chunks": 0})
        elif m["type"] == "audio.done":
            assert m["total_bytes"] == len(reqs[-1]["audio"]) and m["error"] is False, m
    return reqs


def test_websocket_as_a_client_drives_it(stack, http, narrator):
    from websockets.sync.client import connect

    url = stack["url"].replace("http://", "ws://") + "/v1/audio/speech/stream"
    first, second = "Hello from the gateway.", "Dr. Smith reads 3.14 aloud!"
    with connect(url, additional_headers={"X-Request-Id": "e2e-ws-1"}) as ws:
        assert ws.response.headers["x-request-id"] == "e2e-ws-1"
        # errors before and around the config are non-fatal
        ws.send(json.dumps({"type": "input.text", "text": "too early"}))
        assert "session.config" in json.loads(ws.recv(timeout=30))["message"]
        ws.send("not json")
        assert "Invalid JSON" in json.loads(ws.recv(timeout=30))["message"]
        ws.send(json.dumps({"type": "input.flush"}))
        assert "Unknown message type" in json.loads(ws.recv(timeout=30))["message"]
        ws.send(json.dumps({"type": "session.config", "voice": "narrator", "language": "English", "seed": SEED,
                            "max_new_tokens": FRAMES, "stream_audio": True, "split_granularity": "sentence"}))
        for piece in ["Hello from the ", "gateway. Dr. Smith reads 3.", "14 aloud!"]:
            ws.send(json.dumps({"type": "input.text", "text": piece}))
        ws.send(json.dumps({"type": "input.done"}))
        u0 = ws_collect(ws)
        # sticky config: the next utterance on the same connection
        ws.send(json.dumps({"type": "input.text", "text": first}))
        ws.send(json.dumps({"type": "input.done"}))
        u1 = ws_collect(ws)
        # changed config between utterances: the precomputed voice, one WAV payload per request
        ws.send(json.dumps({"type": "session.config", "voice": "alice", "language": "English", "seed": SEED,
                            "max_new_tokens": FRAMES}))
        ws.send(json.dumps({"type": "input.text", "text": first}))
        ws.send(json.dumps({"type": "session.config", "voice": "plain"}))  # mid-utterance: rejected
        ws.send(json.dumps({"type": "input.done"}))
        u2 = ws_collect(ws)
        # idle timeout, between utterances too
        t0 = time.monotonic()
        idle = json.loads(ws.recv(timeout=IDLE_S + 30))
        assert idle["type"] == "error" and "Idle timeout" in idle["message"]
        assert IDLE_S - 0.5 <= time.monotonic() - t0 <= IDLE_S + 10
        with pytest.raises(Exception):  # noqa: B017 - closed by the server
            ws.recv(timeout=10)

    r0 = ws_requests(u0)
    assert [r["start"]["sentence_text"] for r in r0] == [first, second]
    assert [(r["start"]["utterance_index"], r["start"]["sentence_index"]) for r in r0] == [(0, 0), (0, 1)]
    assert all(r["start"]["format"] == "pcm" and r["start"]["sample_rate"] == 24000 for r in r0)
    assert r0[0]["chunks"] >= 2  # PCM streamed as decoded
    assert u0[-1] == {"type": "session.done", "utterance_index": 0, "total_sentences": 2}
    want_first = offline(stack, first)
    assert_same_audio(np.frombuffer(r0[0]["audio"], "<i2"), want_first)
    assert_same_audio(np.frombuffer(r0[1]["audio"], "<i2"), offline(stack, second))

    (r1,) = ws_requests(u1)
    assert (r1["start"]["utterance_index"], r1["start"]["sentence_index"]) == (1, 0)
    assert_same_audio(np.frombuffer(r1["audio"], "<i2"), want_first)

    (r2,) = ws_requests(u2)
    assert r2["start"]["format"] == "wav" and r2["chunks"] == 1
    assert [m["message"] for m in u2 if isinstance(m, dict) and m["type"] == "error"] == [
        "session.config cannot change the configuration in the middle of an utterance; send input.done first "
        "(the previous configuration stays in force)"]
    assert_same_audio(encoding.parse_wav(r2["audio"])[1], want_first)  # alice was precomputed from the same clip


# --- the spec's curl examples (voices sections), in document order -----------------------------------------


def voice_curl_examples() -> list[str]:
    text = SPEC.read_text(encoding="utf-8")
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL):
        for cmd in re.split(r"\n(?=curl )", block.strip()):
            cmd = "\n".join(line for line in cmd.splitlines() if not line.lstrip().startswith("#")).strip()
            if not cmd.startswith("curl") or "localhost:8091" not in cmd:
                continue
            if ("/v1/audio/voices" in cmd and ("-F" in cmd or "DELETE" in cmd)) or "custom_voice_1" in cmd:
                out.append(cmd)
    return out


@pytest.mark.skipif(not SPEC.is_file(), reason=f"no spec at {SPEC}")
def test_spec_voice_curl_examples_work_in_order(stack, tmp_path):
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    cmds = voice_curl_examples()
    kinds = ["upload" if "-F" in c else "delete" if "DELETE" in c else "speak" for c in cmds]
    assert kinds == ["upload", "delete", "upload", "upload", "speak"], cmds
    shutil.copy(stack["ref"], tmp_path / "voice_sample.wav")
    for cmd, kind in zip(cmds, kinds, strict=True):
        run = cmd.replace("localhost:8091", f"127.0.0.1:{stack['gw'].port}").replace(
            "/path/to/voice_sample.wav", str(tmp_path / "voice_sample.wav"))
        out_name = shlex.split(run.replace("\\\n", " "))[-1] if "--output" in run else "body"
        script = run + " -sS -D headers --max-time 300" + ("" if "--output" in run else " --output body")
        done = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, timeout=320)
        assert done.returncode == 0, done.stderr
        status = int((tmp_path / "headers").read_text().split()[1])
        body = (tmp_path / out_name).read_bytes()
        assert status == 200, (cmd, body[:300])
        if kind == "upload":
            result = json.loads(body)
            assert result["success"] is True and result["voice"]["name"] in ("custom_voice_1", "custom_voice_2")
            assert ("ref_text" in result["voice"]) == ("ref_text=" in cmd)
        elif kind == "delete":
            assert json.loads(body) == {"success": True, "message": "Voice 'custom_voice_1' deleted successfully"}
        else:
            data, rate = sf.read(io.BytesIO(body))
            assert rate == 24000 and len(data) > 0
    listing = httpx.get(stack["url"] + VOICES).json()
    assert {"custom_voice_1", "custom_voice_2"} <= {v["name"] for v in listing["uploaded_voices"]}
