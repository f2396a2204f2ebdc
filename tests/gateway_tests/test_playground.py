"""The browser playground (GET /): served open, and driven in a real headless browser (Debian's chromium
through playwright, never a downloaded browser) against the real stack: Triton with the tiny
CustomVoice, VoiceDesign and Base checkpoints behind the gateway, with an API key set.

- the page loads with no console errors and lists the served models, voices and OpenAI aliases;
- a streamed synthesis plays: bytes arrive, Web Audio's clock advances past the audio it scheduled,
  time to first audio and the real-time factor are shown; a whole clip plays in the <audio> element;
- a file upload and a microphone recording (chromium's fake capture device) become voices in the
  list, a cloned voice speaks, and a delete removes it;
- a wrong key shows the API's own message. A screenshot goes to build/playground.png.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf
from fastapi.testclient import TestClient
from gateway_fixtures import FakeBackend, fake_deployment, start_gateway

from gateway.app import create_app
from gateway.settings import Settings
from ttscore.backend.triton_server import free_port

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
KEY = "playground-key"
SCREENSHOT = ROOT / "build" / "playground.png"


@pytest.mark.gateway
def test_the_page_is_open_and_the_api_is_not(tmp_path):
    app = create_app(fake_deployment(tmp_path, api_keys=[KEY]), backend_factory=lambda s: FakeBackend())
    with TestClient(app) as c:
        r = c.get("/")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
        assert '<script src="/static/playground.js"' in r.text and "http" not in r.text.split("<body>")[0]
        for name, kind in (("playground.js", "text/javascript"), ("playground.css", "text/css")):
            r = c.get(f"/static/{name}")
            assert r.status_code == 200 and r.headers["content-type"].startswith(kind)
        assert c.get("/static/app.py").status_code == 404  # only the page's own files
        assert c.get("/static/../settings.py").status_code in (401, 404)
        assert c.get("/v1/models").status_code == 401
        assert c.get("/v1/models", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200


def _browser():
    """(playwright module, reason to skip or None)."""
    if not CHROMIUM.is_file() and shutil.which("chromium") is None:
        return None, "Debian's chromium is not installed (make setup installs it when it runs as root with apt)"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None, "playwright is not installed (requirements.txt)"
    return sync_playwright, None


@pytest.fixture(scope="module")
def stack(e2e_triton, tmp_path_factory):
    cfg = {**e2e_triton["config"], "speaker_samples_dir": str(tmp_path_factory.mktemp("playground-speakers")),
           "api_keys": [KEY]}
    port = free_port()
    server, thread = start_gateway(Settings.from_dict(cfg), port)
    yield {"url": f"http://127.0.0.1:{port}", "names": e2e_triton["names"]}
    server.should_exit = True
    thread.join(15)


def _wav(seconds: float) -> bytes:
    t = np.arange(int(24000 * seconds)) / 24000
    tone = 0.3 * np.sin(2 * np.pi * 180 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))
    buf = io.BytesIO()
    sf.write(buf, tone.astype(np.float32), 24000, format="WAV")
    return buf.getvalue()


@pytest.mark.integration
@pytest.mark.slow
def test_playground_in_a_real_browser(stack, tmp_path):
    sync_playwright, reason = _browser()
    if reason:
        pytest.skip(reason)
    console_errors: list[str] = []
    page_errors: list[str] = []
    sample = tmp_path / "sample.wav"
    sample.write_bytes(_wav(3.0))
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(CHROMIUM if CHROMIUM.is_file() else shutil.which("chromium")),
            args=["--no-sandbox",  # tests run as root
                  "--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream",  # a fake microphone
                  "--autoplay-policy=no-user-gesture-required"],
        )
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            context.add_init_script(f"localStorage.setItem('triton-tts-api-key', '{KEY}')")
            page = context.new_page()
            page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: page_errors.append(str(e)))
            page.goto(stack["url"] + "/")

            # the listings arrive with the key
            page.wait_for_selector("#model option[value='tts-1']", state="attached")
            models = page.eval_on_selector_all("#model option", "os => os.map(o => o.value)")
            assert set(stack["names"].values()) <= set(models) and "gpt-4o-mini-tts" in models
            voices = page.eval_on_selector_all("#voice option", "os => os.map(o => o.value)")
            assert {"vivian", "ryan", "alloy"} <= set(voices)
            page.wait_for_selector("#server-status.ok")

            # a streamed synthesis plays through Web Audio
            page.fill("#text", "Hello from the playground. It streams while it speaks.")
            page.select_option("#voice", "alloy")
            page.select_option("#language", "English")
            page.fill("#seed", "7")
            page.fill("#max-frames", "24")
            page.click("#speak")
            page.wait_for_selector("#stats[data-done='true']", timeout=120_000)
            stats = page.eval_on_selector("#stats", "e => ({...e.dataset})")
            assert page.inner_text("#error") == "" and page.is_hidden("#error")
            assert int(stats["bytes"]) == 24 * 1920 * 2  # 24 frames of 16-bit PCM, all received
            assert float(stats["audioSeconds"]) == pytest.approx(24 * 1920 / 24000)
            assert float(stats["playedSeconds"]) > 0.9 * float(stats["audioSeconds"])  # the audio clock ran through it
            assert float(stats["ttfaMs"]) > 0 and float(stats["rtf"]) > 0
            assert page.inner_text("#stat-ttfa").endswith(" ms") and page.inner_text("#stat-rtf") != "–"

            # a whole clip plays in the <audio> element
            page.uncheck("#stream")
            page.select_option("#format", "wav")
            page.click("#speak")
            page.wait_for_selector("#stats[data-done='true']", timeout=120_000)
            page.wait_for_function("document.getElementById('player').currentTime > 0.2", timeout=30_000)
            assert float(page.eval_on_selector("#stats", "e => e.dataset.audioSeconds")) == pytest.approx(1.92)

            # clone: a file, then the (fake) microphone; both appear in the list
            page.fill("#voice-name", "pg-file")
            page.fill("#voice-text", "A steady tone for cloning.")
            page.set_input_files("#voice-file", str(sample))
            page.check("#consent")
            page.click("#upload")
            page.wait_for_selector("#voice-list li[data-voice='pg-file']")
            assert page.eval_on_selector("#voice", "s => s.value") == "pg-file"
            page.fill("#voice-name", "pg-mic")
            page.fill("#voice-text", "")
            page.click("#record")
            page.wait_for_timeout(2500)
            page.click("#record-stop")
            page.wait_for_selector("#sample:not([hidden])")
            page.click("#upload")
            page.wait_for_selector("#voice-list li[data-voice='pg-mic']", timeout=60_000)
            assert page.is_hidden("#error"), page.inner_text("#error")

            # the cloned voice speaks (routed to the Base model)
            page.check("#stream")
            page.select_option("#voice", "pg-file")
            page.click("#speak")
            page.wait_for_selector("#stats[data-done='true']", timeout=120_000)
            assert page.is_hidden("#error"), page.inner_text("#error")
            assert int(page.eval_on_selector("#stats", "e => e.dataset.bytes")) == 24 * 1920 * 2

            page.click("#voice-list li[data-voice='pg-mic'] button.delete")
            page.wait_for_selector("#voice-list li[data-voice='pg-mic']", state="detached")
            listing = httpx.get(stack["url"] + "/v1/audio/voices", headers={"Authorization": f"Bearer {KEY}"}).json()
            assert [v["name"] for v in listing["uploaded_voices"]] == ["pg-file"]

            SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOT), full_page=True)
            assert console_errors == [] and page_errors == []

            # errors are the API's messages: a wrong key
            page.fill("#api-key", "wrong-key")
            page.dispatch_event("#api-key", "change")
            page.wait_for_selector("#error:not([hidden])")
            assert page.inner_text("#error") == "Incorrect API key provided"
            page.fill("#api-key", KEY)
            page.dispatch_event("#api-key", "change")
            page.wait_for_selector("#error", state="hidden")
            assert page_errors == []
        finally:
            browser.close()


def test_playground_live_text_and_its_stop_in_a_real_browser(stack):
    """Live text: the words go over the WebSocket into one incremental generation and play as they
    come; Stop mid-utterance is a barge-in (input.cancel): the server answers with a cancelled
    audio.done, and the Triton request is released (the gateway's metrics)."""
    sync_playwright, reason = _browser()
    if reason:
        pytest.skip(reason)
    page_errors: list[str] = []
    auth = {"Authorization": f"Bearer {KEY}"}
    before = httpx.get(stack["url"] + "/metrics", headers=auth).text
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=str(CHROMIUM if CHROMIUM.is_file() else shutil.which("chromium")),
            args=["--no-sandbox", "--autoplay-policy=no-user-gesture-required"],
        )
        try:
            context = browser.new_context()
            context.add_init_script(f"localStorage.setItem('triton-tts-api-key', '{KEY}')")
            page = context.new_page()
            page.on("pageerror", lambda e: page_errors.append(str(e)))
            page.goto(stack["url"] + "/")
            page.wait_for_selector("#model option[value='tts-1']", state="attached")
            page.select_option("#model", stack["names"]["custom_voice"])
            page.select_option("#voice", "vivian")
            page.fill("#seed", "7")
            page.fill("#max-frames", "4000")  # far longer than the test lets it run
            page.fill("#text", " ".join(["Words keep coming from the model."] * 8))
            page.check("#live")
            page.click("#speak")
            page.wait_for_selector("#stats[data-mode='incremental']", timeout=60_000)
            page.wait_for_function("Number(document.getElementById('stats').dataset.bytes || 0) > 0",
                                   timeout=120_000)
            assert page.eval_on_selector("#stats", "e => e.dataset.done") == "false"  # still speaking
            page.click("#stop")
            page.wait_for_selector("#stats[data-done='true']", timeout=60_000)
            stats = page.eval_on_selector("#stats", "e => ({...e.dataset})")
            assert stats["cancelled"] == "true" and page.is_hidden("#error"), page.inner_text("#error")
            assert page_errors == []
        finally:
            browser.close()
    after = httpx.get(stack["url"] + "/metrics", headers=auth).text

    def cancelled(text: str) -> float:
        line = [m for m in text.splitlines() if m.startswith('tts_cancelled_requests_total{route="/v1/audio/speech/stream"}')]
        return float(line[0].rsplit(" ", 1)[1]) if line else 0.0

    assert cancelled(after) == cancelled(before) + 1
