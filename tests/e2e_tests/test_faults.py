"""Faults against the REAL tritonserver and gateway: processes are killed with SIGKILL mid-request.

- A speech_generation stub process killed with a request of every kind in flight (SSE, raw stream,
  a whole-clip request still before its headers, a WebSocket session): every client gets its error
  within 10 s, /ready turns 503 naming the model and returns to 200 by itself (the gateway's health
  monitor reloads the model through Triton's repository API) within 60 s, the next request and the
  WebSocket session succeed. Triton here serves the production model.py with its generator
  replaced by FakeGenerator (tests/data/fake_speech_generation_model.py), so no export is needed.
- A step of the voice_features ensemble killed: readiness names it, the ensemble comes back.
- `triton-tts serve` (real tiny checkpoints) with tritonserver itself killed: the stream in flight
  errors at once, /ready 503, serve restarts tritonserver, /ready 200, the next request and an
  uploaded voice (stored by the gateway) work.

Measured times are printed (pytest -s). Every process started here is stopped, whatever happens.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fault_clients
import httpx
import pytest
from fault_clients import SPEECH, Client, until_audio_done, ws_done, ws_errors
from gateway_fixtures import fake_deployment, start_gateway
from procs import Proc, child_with, descendants, poll, wait_until
from websockets.sync.client import connect

from gateway import sse
from triton_tts.supervisor import RestartPolicy, Supervisor
from ttscore.backend.triton_server import free_ports

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TESTS = Path(__file__).resolve().parents[1]
FAKE_GENERATION_MODEL = TESTS / "data" / "fake_speech_generation_model.py"
LONG = 4096  # max_new_tokens (the most Qwen3-TTS takes): minutes of fake frames, so a request is surely in flight


def ready(url: str) -> httpx.Response | None:
    try:
        return httpx.get(url + "/ready", timeout=5)
    except httpx.HTTPError:
        return None


def ready_status(url: str) -> int | None:
    r = ready(url)
    return r.status_code if r is not None else None


def sse_client(url: str, **fields: Any) -> Callable[[Client], Any]:
    return fault_clients.sse_client(url, {"input": "Keep talking.", "max_new_tokens": LONG, **fields}, 120)


def raw_client(url: str, **fields: Any) -> Callable[[Client], Any]:
    return fault_clients.raw_client(url, {"input": "Keep talking.", "max_new_tokens": LONG, **fields}, 120)


def plain_client(url: str, **fields: Any) -> Callable[[Client], Any]:
    def work(c: Client) -> httpx.Response:
        return httpx.post(url + SPEECH, json={"input": "A whole clip.", "max_new_tokens": LONG, **fields}, timeout=120)
    return work


def ws_client(port: int, resume: threading.Event, **config: Any) -> Callable[[Client], Any]:
    """One long request, then (once `resume` is set) a short one on the same connection."""
    def work(c: Client) -> list:
        got: list = []
        with connect(f"ws://127.0.0.1:{port}/v1/audio/speech/stream") as ws:
            ws.send(json.dumps({"type": "session.config", "stream_audio": True, "max_new_tokens": LONG, **config}))
            ws.send(json.dumps({"type": "input.text", "text": "A long sentence."}))
            ws.send(json.dumps({"type": "input.done"}))
            until_audio_done(ws, c, got, 120)
            resume.wait(120)
            ws.send(json.dumps({"type": "session.config", "stream_audio": True, "max_new_tokens": 5, **config}))
            ws.send(json.dumps({"type": "input.text", "text": "And a short one."}))
            ws.send(json.dumps({"type": "input.done"}))
            until_audio_done(ws, c, got, 120)
        return got
    return work


def watch_readiness(url: str, model: str, since: float, timeout: float, server: Any = None
                    ) -> tuple[float, float, dict]:
    """Seconds from `since` to the first 503 naming `model`, and to the first 200 after it
    (on failure: the last /ready body and, given `server`, whether tritonserver lives and its log)."""
    not_ready_at, body, last = None, {}, None
    deadline = since + timeout
    while time.monotonic() < deadline:
        r = ready(url)
        last = r if r is not None else last
        if r is not None and r.status_code == 503 and not_ready_at is None:
            data = r.json()
            if model in data.get("broken", {}) or data.get("triton") is False:
                not_ready_at, body = time.monotonic(), data
        if r is not None and r.status_code == 200 and not_ready_at is not None:
            return not_ready_at - since, time.monotonic() - since, body
        time.sleep(0.05)
    detail = f"; last /ready: {last.status_code} {last.text}" if last is not None else ""
    if server is not None:
        detail += f"; tritonserver alive: {server.is_alive()}; its log:\n{server.log_tail(80)}"
    raise AssertionError(f"readiness did not go 503 -> 200 within {timeout} s (503 seen: {not_ready_at is not None})"
                         + detail)


# --- a stub process dies ------------------------------------------------------------------------------


def supervised(server: Any) -> tuple[Supervisor, Callable[[], None]]:
    """Run `server` the way production does: under a Supervisor polled from a thread (what
    `triton-tts serve` does; Compose and Kubernetes restart the container instead). Returns the
    function that stops the watching (call it before stopping the server) and returns the supervisor.

    Why: killing a python stub with decoupled requests in flight once took tritonserver 2.51 down
    with it (CI, stop 33: the streams got UNAVAILABLE at once, liveness failed and nothing restarted
    it). The gateway's side of that is the same (errors, 503, 200 once Triton is back); the tests say
    which path a run took (`Supervisor.restarts`)."""
    sup = Supervisor(server, RestartPolicy(backoff_initial_s=0.5, ready_timeout_s=120.0))
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.2) and sup.poll():
            pass

    thread = threading.Thread(target=watch, daemon=True, name="supervisor")
    thread.start()

    def stop() -> None:
        done.set()
        thread.join(10)
    return sup, stop


@pytest.fixture
def stack(triton_server, dummy_artifacts, tmp_path):
    """Real Triton (production model.py files, FakeGenerator) under a supervisor + the gateway
    (uvicorn, in process) with its default health settings."""
    server = triton_server(
        models=["speech_generation", "code2wav", "voice_features", "audio_preprocess", "speaker_encoder",
                "speech_encoder"],
        artifacts_dir=dummy_artifacts,
        settings={"speech_generation": {"parameters": {"max_active_requests": "8"}}},
        model_overrides={"speech_generation": FAKE_GENERATION_MODEL},
        env={"TTS_FAKE_STEP_DELAY_S": "0.02", "TTS_FAKE_SPF": "1920"},
    )
    settings = fake_deployment(tmp_path, ("custom_voice",), triton_url=server.grpc_url,
                               readiness_models=["code2wav", "voice_features"])
    port = free_ports(1)[0]
    supervisor, stop_supervising = supervised(server)
    gw, thread = start_gateway(settings, port)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: ready_status(url) == 200, 60, f"the gateway's /ready ({url})",
                   detail=lambda: ((r := ready(url)) is not None and r.text) or "no gateway")
        yield {"server": server, "url": url, "port": port, "supervisor": supervisor}
    finally:
        gw.should_exit = True
        thread.join(15)
        stop_supervising()
        server.stop()


def test_speech_generation_stub_killed_with_requests_in_flight(stack):
    url, server = stack["url"], stack["server"]
    resume = threading.Event()
    clients = {
        "sse": Client(sse_client(url, voice="vivian")),
        "raw": Client(raw_client(url, voice="vivian")),
        "ws": Client(ws_client(stack["port"], resume, voice="vivian")),
    }
    try:
        for name, c in clients.items():
            assert c.first.wait(30), f"{name}: no audio before the fault ({c.result})"
        clients["plain"] = Client(plain_client(url, voice="vivian"))
        time.sleep(0.5)  # admitted, generating, headers not sent

        stub = child_with(server.pid, "/speech_generation/1/model.py")
        os.kill(stub, signal.SIGKILL)
        killed = time.monotonic()
        for name, c in clients.items():
            if name != "ws":
                c.join(15)
                assert not c.is_alive(), f"{name} still hanging 15 s after the kill"
        errors_after = {name: round(c.ended_at - killed, 2) for name, c in clients.items() if name != "ws"}
        not_ready_s, ready_s, body = watch_readiness(url, "speech_generation", killed, 60, server)
        restarted = stack["supervisor"].restarts > 0  # tritonserver died with its stub (see `supervised`)
        print(f"\nstub killed: clients ended after {errors_after} s; /ready 503 after {not_ready_s:.2f} s "
              f"({body['broken']}), 200 again after {ready_s:.2f} s "
              f"({'tritonserver died too and was restarted' if restarted else 'the gateway reloaded the model'})")
        assert all(t < 10 for t in errors_after.values()), errors_after
        if restarted:  # readiness saw Triton itself go
            assert body["triton"] is False, body
        else:
            assert "speech_generation" in body["broken"] and body["models"]["speech_generation"] is False

        events = clients["sse"].result
        assert isinstance(events, list) and events[-1][0] == sse.ERROR, events[-3:]
        assert events[-1][1]["error"]["code"] == 503
        assert isinstance(clients["raw"].result, httpx.RemoteProtocolError), clients["raw"].result
        plain = clients["plain"].result
        assert isinstance(plain, httpx.Response) and plain.status_code == 503 and plain.headers["retry-after"]

        # Repaired: a new stub serves the next request to its end.
        after = Client(sse_client(url, voice="vivian", max_new_tokens=5))
        after.join(60)
        assert [name for name, _ in after.result][-1] == sse.DONE, after.result
        resume.set()
        clients["ws"].join(60)
        done, errs = ws_done(clients["ws"].result), ws_errors(clients["ws"].result)
        assert done == [True, False] and len(errs) == 1 and "not available" in errs[0], clients["ws"].result
        assert "reloading model speech_generation" not in server.log_tail(400)  # the gateway logs that, not Triton
        assert "successfully loaded 'speech_generation'" in server.log_tail(400)
    finally:
        resume.set()
        for c in clients.values():
            c.join(5)


def test_ensemble_step_stub_killed(stack):
    url, server = stack["url"], stack["server"]
    os.kill(child_with(server.pid, "/audio_preprocess/1/model.py"), signal.SIGKILL)
    killed = time.monotonic()
    not_ready_s, ready_s, body = watch_readiness(url, "voice_features", killed, 60, server)
    print(f"\naudio_preprocess killed: /ready 503 after {not_ready_s:.2f} s ({body['broken']}), "
          f"200 again after {ready_s:.2f} s")
    assert body["broken"]["voice_features"].startswith("audio_preprocess: ")
    assert ready_s < 60
    child_with(server.pid, "/audio_preprocess/1/model.py")  # a fresh stub


# --- tritonserver dies under `triton-tts serve` --------------------------------------------------------


def _seed_artifacts(cache: Path, checkpoint: Path, artifacts: Path) -> None:
    """Where `serve` looks for an up-to-date export (triton_tts.cli.ensure_artifacts): the session's."""
    from export.exporter import fingerprint

    src = checkpoint.resolve()
    (cache / "artifacts").mkdir(parents=True, exist_ok=True)
    (cache / "artifacts" / f"{fingerprint(src)}-fp32").symlink_to(artifacts.resolve())


def test_tritonserver_killed_under_serve(tiny_custom_voice_greedy, tiny_base_greedy, tmp_path):
    from voices_audio import wav

    cache = tmp_path / "cache"
    for ckpt, art, _ in (tiny_custom_voice_greedy, tiny_base_greedy):
        _seed_artifacts(cache, ckpt, art)
    port, http_port, grpc_port, metrics_port = free_ports(4)
    env = {**os.environ, "TRITON_TTS_CACHE": str(cache), "SPEAKER_SAMPLES_DIR": str(tmp_path / "voices")}
    cmd = [sys.executable, "-m", "triton_tts.cli", "serve", "--checkpoint", str(tiny_custom_voice_greedy[0]),
           "--checkpoint", str(tiny_base_greedy[0]), "--host", "127.0.0.1", "--port", str(port),
           "--triton-http-port", str(http_port), "--triton-grpc-port", str(grpc_port),
           "--triton-metrics-port", str(metrics_port), "--work", str(tmp_path / "work"), "--max-active", "4"]
    serve = Proc(cmd, tmp_path / "serve.log", env=env, cwd=TESTS.parent, name="triton-tts serve").start()
    url = f"http://127.0.0.1:{port}"
    family: list[int] = []
    try:
        wait_until(lambda: ready_status(url) == 200, 240, f"triton-tts serve's /ready ({url})", logs=[serve])
        family = [serve.pid, *descendants(serve.pid)]
        cv, base = (json.loads((tmp_path / "work" / "gateway.json").read_text())["models"][i]["name"] for i in (0, 1))
        r = httpx.post(url + "/v1/audio/voices", files={"audio_sample": ("me.wav", wav(1.5), "audio/wav")},
                       data={"consent": "yes", "name": "kept", "ref_text": "My own voice."}, timeout=60)
        assert r.status_code == 200, r.text

        c = Client(sse_client(url, model=cv, voice="vivian", max_new_tokens=2000))
        assert c.first.wait(60), c.result
        triton = child_with(serve.pid, "bin/tritonserver --model-repository")
        os.kill(triton, signal.SIGKILL)
        killed = time.monotonic()
        c.join(15)
        assert not c.is_alive() and c.result[-1][0] == sse.ERROR, c.result
        error_s = c.ended_at - killed
        not_ready_s, ready_s, body = watch_readiness(url, "", killed, 60)
        print(f"\ntritonserver killed: stream ended after {error_s:.2f} s; /ready 503 after {not_ready_s:.2f} s "
              f"(triton={body['triton']}), 200 again after {ready_s:.2f} s")
        assert error_s < 10 and body["triton"] is False
        assert child_with(serve.pid, "bin/tritonserver --model-repository") != triton
        assert "restarting tritonserver in 1 s" in serve.log_text()

        ok = httpx.post(url + SPEECH, json={"model": cv, "input": "Hello again.", "voice": "vivian",
                                            "max_new_tokens": 8}, timeout=60)
        assert ok.status_code == 200 and ok.content[:4] == b"RIFF", ok.text
        voices = httpx.get(url + "/v1/audio/voices", timeout=10).json()
        assert "kept" in voices["voices"]
        cloned = httpx.post(url + SPEECH, json={"model": base, "input": "Still me.", "voice": "kept",
                                                "max_new_tokens": 8}, timeout=60)
        assert cloned.status_code == 200, cloned.text
        family = [serve.pid, *descendants(serve.pid)]
    finally:
        if serve.alive():
            family = list(dict.fromkeys([*family, *descendants(serve.pid)]))
        serve.stop(signal.SIGINT, timeout_s=60)
        for pid in family:  # nothing may outlive serve: gateway, tritonserver, stubs
            if pid != serve.pid and poll(lambda p=pid: not Path(f"/proc/{p}").exists(), 10) is None:
                os.kill(pid, signal.SIGKILL)
                pytest.fail(f"process {pid} outlived triton-tts serve")
    assert serve.returncode == 0, serve.log_tail()
