"""pipecat's ElevenLabs services, unchanged, against the real stack through the gateway's ElevenLabs dialect
(issue 41). pipecat-ai lives in its own environment (.venv-pipecat, requirements-pipecat.txt: its pins differ
from .venv's); tests/pipecat_agent.py runs a pipeline there as a subprocess: an utterance spoken to its end, a
long one interrupted after its first audio, the next one served. Over the e2e deployment (no aligner) alignment is
null; a second, module stack with the tiny forced aligner (`serve --aligner`) gives pipecat its word timestamps.
The settings are the served model and voice, nothing else: each utterance runs to its end of speech or the family's
frame budget, so the interrupted one is still being generated when the interruption comes, which the gateway's
count of cancelled requests shows."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import httpx
import pytest
from aligner_fixtures import *  # noqa: F403  (aligner_tiny, aligner_artifacts)
from gateway_fixtures import render_stack_repository, start_gateway

from gateway.settings import Settings
from ttscore.backend.triton_server import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PIPECAT = ROOT / ".venv-pipecat" / "bin" / "python"
AGENT = ROOT / "tests" / "pipecat_agent.py"
KEY = "e2e-pipecat-key"


@pytest.fixture(scope="module")
def stack(e2e_triton, tmp_path_factory):
    if not PIPECAT.exists():
        pytest.skip(f"{PIPECAT} is missing: `make setup` builds it (requirements-pipecat.txt)")
    cfg = {**e2e_triton["config"], "speaker_samples_dir": str(tmp_path_factory.mktemp("pipecat-speakers")),
           "health_interval_s": 0, "api_keys": [KEY]}
    port = free_port()
    gw, thread = start_gateway(Settings.from_dict(cfg), port)
    yield {"url": f"http://127.0.0.1:{port}", "model": e2e_triton["names"]["custom_voice"]}
    gw.should_exit = True
    thread.join(15)


def run_agent(stack, service: str, model: str) -> dict:
    out = subprocess.run([str(PIPECAT), str(AGENT), "--service", service, "--url", stack["url"], "--key", KEY,
                          "--voice", "vivian", "--model", model, "--timeout", "240"],
                         capture_output=True, text=True, timeout=600, check=False)
    lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
    assert out.returncode == 0 and lines, f"rc {out.returncode}\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}"
    result = json.loads(lines[-1])
    assert "failure" not in result, result
    return result


def cancelled(stack) -> float:
    text = httpx.get(f"{stack['url']}/metrics", timeout=10).text
    return sum(float(m.group(1)) for m in re.finditer(r"^tts_cancelled_requests_total\{.*\} (\S+)$", text, re.M))


def test_websocket_service_speaks_is_interrupted_and_serves_the_next_utterance(stack):
    before = cancelled(stack)
    got = run_agent(stack, "ws", stack["model"])
    assert got["errors"] == []
    assert got["first_bytes"] > 0 and got["next_bytes"] > 0
    # interrupted mid-utterance: its audio had started, none came after the interruption, and its generation
    # (with its Triton request) was cancelled, not run to its end
    assert got["interrupted_bytes_before"] > 0 and got["interrupted_bytes_after"] == 0
    assert cancelled(stack) > before, got


def test_http_service_speaks_is_interrupted_and_serves_the_next_utterance(stack):
    before = cancelled(stack)
    got = run_agent(stack, "http", stack["model"])
    assert got["errors"] == []
    assert got["first_bytes"] > 0 and got["next_bytes"] > 0
    assert got["interrupted_bytes_before"] > 0 and got["interrupted_bytes_after"] == 0

    assert cancelled(stack) > before, got  # pipecat dropped the response at the interruption: its Triton request ended


@pytest.fixture(scope="module")
def aligned_stack(triton_server, tiny_custom_voice_greedy, aligner_artifacts, tmp_path_factory):
    """Its own stack: the tiny greedy CustomVoice and the tiny forced aligner (`serve --aligner`)."""
    if not PIPECAT.exists():
        pytest.skip(f"{PIPECAT} is missing: `make setup` builds it (requirements-pipecat.txt)")
    ckpt, art, _ = tiny_custom_voice_greedy
    work = tmp_path_factory.mktemp("pipecat-aligned")
    repo, cfg = render_stack_repository(work, [(ckpt, art)], max_active=2, aligner=aligner_artifacts)
    server = triton_server(repo, ready_timeout_s=180)
    cfg = {**cfg, "triton_url": server.grpc_url, "speaker_samples_dir": str(work / "speakers"),
           "health_interval_s": 0, "api_keys": [KEY]}
    port = free_port()
    gw, thread = start_gateway(Settings.from_dict(cfg), port)
    yield {"url": f"http://127.0.0.1:{port}", "model": cfg["models"][0]["name"]}
    gw.should_exit = True
    thread.join(15)


def test_websocket_service_gets_word_timestamps_from_the_alignment(aligned_stack):
    got = run_agent(aligned_stack, "ws", aligned_stack["model"])
    assert got["errors"] == [] and got["first_bytes"] > 0 and got["next_bytes"] > 0
    assert got["interrupted_bytes_after"] == 0
    words = [w for w, _ in got["words"]]
    # pipecat's word timestamps, from the character alignment: word by word, not the sentence as one text
    assert words[:3] == ["Hello", "from", "pipecat."], got["words"]
    times = [t for _, t in got["words"][:3]]
    assert None in times or times == sorted(times)


def test_http_service_gets_word_timestamps_from_the_alignment(aligned_stack):
    got = run_agent(aligned_stack, "http", aligned_stack["model"])
    assert got["errors"] == [] and got["first_bytes"] > 0 and got["next_bytes"] > 0
    assert [w for w, _ in got["words"]][:3] == ["Hello", "from", "pipecat."], got["words"]
