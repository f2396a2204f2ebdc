"""The gateway's stall limit (`stall_timeout_s`) against the REAL tritonserver, speech_generation's keep-alives on
(ttscore.backend.generation, `keepalive_s` 1 here): the production model.py and config with the generator replaced
by FakeGenerator (tests/data/fake_speech_generation_model.py), and the gateway (in process) with a short stall limit.

- A family step longer than the stall limit (text "slow-step": one step of SLOW_STEP_S after the first chunk, what
  OmniVoice at real size does for tens of seconds): Triton sends keep-alives meanwhile (not final, no frames, no
  audio; none before the first chunk), the gateway's stream is not cut and its audio is the same as a stream's
  without the slow step (a keep-alive reaches no client).
- The speech_generation stub stopped (SIGSTOP) mid-stream: its keep-alive thread stops with it, so the stream still
  ends with the stall error within the stall limit; after SIGCONT the stub serves the next request.

The gateway's health monitor is off here, so the stall limit alone reports the stopped stub (with it on, a probe
may name the stub first: Triton answers "Stub process ... is not healthy").
"""

from __future__ import annotations

import base64
import os
import queue
import signal
import time
from pathlib import Path
from typing import Any

import fault_clients
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from fault_clients import Client
from gateway_fixtures import fake_deployment, start_gateway
from grpc_inputs import to_inputs
from procs import child_with

from gateway import sse
from ttscore.backend.triton_server import free_ports
from ttscore.contract import tensors as triton_io

pytestmark = [pytest.mark.integration, pytest.mark.slow]

STALL_S = 2.5  # the gateway's stall_timeout_s here
SLOW_STEP_S = 4.0  # > STALL_S: without keep-alives the slow step's stream is cut
KEEPALIVE_S = 1  # speech_generation's keepalive_s here (the thread looks every KEEPALIVE_S / 4)
LONG = 4096  # frames: a stream still running when the stub is stopped
FAKE_GENERATION_MODEL = Path(__file__).resolve().parents[1] / "data" / "fake_speech_generation_model.py"


@pytest.fixture(scope="module")
def stack(triton_server, dummy_artifacts, tmp_path_factory):
    server = triton_server(
        models=["speech_generation"],
        artifacts_dir=dummy_artifacts,
        settings={"speech_generation": {"parameters": {"keepalive_s": str(KEEPALIVE_S)}}},
        model_overrides={"speech_generation": FAKE_GENERATION_MODEL},
        env={"TTS_FAKE_STEP_DELAY_S": "0.02", "TTS_FAKE_SPF": "1920", "TTS_FAKE_SLOW_STEP_S": str(SLOW_STEP_S)},
    )
    settings = fake_deployment(tmp_path_factory.mktemp("stalls"), ("custom_voice",), triton_url=server.grpc_url,
                               stall_timeout_s=STALL_S, request_timeout_s=120, health_interval_s=0)
    port = free_ports(1)[0]
    gw, thread = start_gateway(settings, port)
    try:
        yield {"server": server, "url": f"http://127.0.0.1:{port}"}
    finally:
        gw.should_exit = True
        thread.join(15)


def triton_stream(url: str, text: str, frames: int) -> list[tuple[float, int, int, bool]]:
    """One speech_generation request straight to Triton: (arrival, frames, audio samples, final) per response."""
    client = grpcclient.InferenceServerClient(url)
    got: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: got.put((result, error, time.monotonic())))
    out = []
    try:
        inputs = to_inputs(triton_io.request_tensors(text=text, max_new_tokens=frames))
        client.async_stream_infer("speech_generation", inputs, request_id=text, enable_empty_final_response=True)
        while True:
            result, error, at = got.get(timeout=60)
            assert error is None, error
            final = bool(result.get_response().parameters["triton_final_response"].bool_param)
            n = result.as_numpy("frames")
            audio = result.as_numpy("audio")
            out.append((at, 0 if n is None else int(n[0]), 0 if audio is None else audio.size, final))
            if final:
                return out
    finally:
        client.stop_stream()
        client.close()


def sse_audio(events: Any) -> list[bytes]:
    assert isinstance(events, list) and events and events[-1][0] == sse.DONE, events
    return [base64.b64decode(data["audio"]) for name, data in events if name == sse.DELTA]


def test_a_step_longer_than_the_stall_limit_completes_with_keepalives(stack):
    body = {"voice": "vivian", "max_new_tokens": 3}
    through_gateway = Client(fault_clients.sse_client(stack["url"], {"input": "slow-step", **body}, 60))
    wire = triton_stream(stack["server"].grpc_url, "slow-step", 3)  # meanwhile, on Triton's own wire
    through_gateway.join(60)
    steady = Client(fault_clients.sse_client(stack["url"], {"input": "steady", **body}, 60))
    steady.join(60)

    chunks = [i for i, (_, frames, _, _) in enumerate(wire) if frames]
    keepalives = [r for r in wire if triton_io.is_keepalive(r[1], r[3])]
    gaps = np.diff([at for at, *_ in wire])
    print(f"\nslow step of {SLOW_STEP_S:g} s: {len(keepalives)} keep-alives on Triton's wire, the longest silence "
          f"{gaps.max():.2f} s (stall limit {STALL_S:g} s)")
    assert [frames for _, frames, _, _ in wire if frames] == [1, 1, 1], wire
    assert len(keepalives) >= int(SLOW_STEP_S // (KEEPALIVE_S + 0.5)), wire  # every KEEPALIVE_S, give or take
    assert all(samples == 0 for _, _, samples, _ in keepalives), wire
    assert chunks[0] == 0 and all(not r[1] for r in wire[1:chunks[1]]), wire  # none before the first chunk
    assert wire[chunks[1]][0] - wire[chunks[0]][0] > STALL_S, wire  # the step outlasted the stall limit ...
    assert gaps.max() < STALL_S, wire  # ... but Triton was never silent that long
    # the gateway: not cut, no empty delta, the same audio as without the slow step
    slow = sse_audio(through_gateway.result)
    assert all(slow) and b"".join(slow) == b"".join(sse_audio(steady.result))


def test_a_stopped_stub_is_still_reported_within_the_stall_limit(stack):
    """Runs last in the module (it stops the stub; it resumes it and checks that it serves again)."""
    c = Client(fault_clients.sse_client(stack["url"], {"input": "Keep talking.", "voice": "vivian",
                                                       "max_new_tokens": LONG}, 60))
    assert c.first.wait(30), c.result
    stub = child_with(stack["server"].pid, "/speech_generation/1/model.py")
    os.kill(stub, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        c.join(STALL_S + 15)
    finally:
        os.kill(stub, signal.SIGCONT)
    assert not c.is_alive(), "the stream still runs with its stub stopped"
    after = c.ended_at - stopped
    print(f"\nstub stopped: the stream ended {after:.2f} s later (stall limit {STALL_S:g} s)")
    events = c.result
    assert isinstance(events, list) and events[-1][0] == sse.ERROR, events[-3:]
    error = events[-1][1]["error"]
    assert error["code"] == 504 and f"sent nothing for {STALL_S:g} s" in error["message"], error
    assert after < STALL_S + 1.5, after  # the last response came just before the stop

    # the stub runs again: the next request is served to its end
    again = Client(fault_clients.sse_client(stack["url"], {"input": "Again.", "voice": "vivian",
                                                           "max_new_tokens": 5}, 60))
    again.join(60)
    assert sse_audio(again.result)
