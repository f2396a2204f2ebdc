"""Scaling out on one machine, with real servers on loopback: two tritonserver processes serving the
same tiny deployment (greedy CustomVoice + greedy Base, as `triton-tts serve` renders it) and two
gateway processes (`python -m gateway`) sharing one voices directory, each given both Triton
endpoints.

- Load spreads over both Tritons: counted by each Triton's own inference statistics.
- One tritonserver SIGKILLed under load (half the clients ask for their first audio only at the end
  of the clip, so requests without audio are surely in flight): a request that had no audio yet when it failed is retried
  on the other endpoint, so every request without audio, and every request after the kill,
  succeeds; a stream that already had audio ends with a clean in-band `speech.audio.error`; nothing
  hangs. The time until each gateway's /ready reports the dead endpoint out is measured and bounded.
- A voice uploaded through gateway A speaks through gateway B; a delete on B is seen on A.

The figures are printed (pytest -s). Every process started here is stopped, whatever happens.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from gateway_process import GatewayProcess
from procs import poll, wait_until
from voices_audio import wav

from gateway import sse

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SPEECH = "/v1/audio/speech"
VOICES = "/v1/audio/voices"
CLIENTS = 4  # concurrent clients, spread over the two gateways
SPREAD_REQUESTS = 24
FRAMES = 12  # max_new_tokens of a load request: ~1 s of audio
KILL_AFTER_S = 3.0
LOAD_AFTER_KILL_S = 8.0
CLIENT_TIMEOUT_S = 60.0
IN_TRANSIT_S = 1.0  # a chunk on its way from the gateway to the client at the kill arrives within this
OUT_WITHIN_S = 10.0  # the dead endpoint must be out of every gateway's /ready by then


@dataclass
class Outcome:
    started_at: float
    audio: int = 0  # audio bytes received
    first_audio_at: float | None = None
    ok: bool = False  # the stream ended with speech.audio.done
    error: str = ""  # in-band error, HTTP error or exception
    ended_at: float = 0.0
    status: int | None = None


@dataclass
class Load:
    """CLIENTS threads sending streaming requests one after another, alternating gateways, until stopped."""

    urls: list[str]
    model: str
    outcomes: list[Outcome] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    limit: int | None = None  # total requests, when bounded by count

    def run(self) -> None:
        threads = [threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(CLIENTS)]
        self._lock = threading.Lock()
        self._n = 0
        for t in threads:
            t.start()
        self.threads = threads

    def join(self, timeout: float) -> None:
        for t in self.threads:
            t.join(timeout)
        assert not any(t.is_alive() for t in self.threads), "a client is still hanging"

    def _next(self) -> int | None:
        with self._lock:
            if self.stop.is_set() or (self.limit is not None and self._n >= self.limit):
                return None
            self._n += 1
            return self._n

    def _client(self, index: int) -> None:
        while (n := self._next()) is not None:
            url = self.urls[(index + n) % len(self.urls)]
            outcome = Outcome(time.monotonic())
            with self._lock:
                self.outcomes.append(outcome)
            body = {"model": self.model, "input": f"Request number {n}.", "voice": "vivian", "stream": True,
                    "response_format": "pcm", "max_new_tokens": FRAMES}
            if index % 2:  # half the clients get their audio only at the end: in flight without audio at the kill
                body["initial_codec_chunk_frames"] = FRAMES
            try:
                with httpx.stream("POST", url + SPEECH, json=body, timeout=CLIENT_TIMEOUT_S) as r:
                    outcome.status = r.status_code
                    if r.status_code != 200:
                        outcome.error = f"HTTP {r.status_code}: {r.read()[:200]!r}"
                        continue
                    buf = ""
                    for part in r.iter_text():
                        buf += part
                        while "\n\n" in buf:
                            block, buf = buf.split("\n\n", 1)
                            for name, data in sse.parse(block + "\n\n"):
                                if name == sse.DELTA:
                                    outcome.audio += len(data.get("audio", ""))
                                    outcome.first_audio_at = outcome.first_audio_at or time.monotonic()
                                elif name == sse.DONE:
                                    outcome.ok = True
                                elif name == sse.ERROR:
                                    outcome.error = json.dumps(data)[:300]
            except Exception as exc:  # a cut or refused connection: recorded, judged below
                outcome.error = f"{type(exc).__name__}: {exc}"
            finally:
                outcome.ended_at = time.monotonic()


def completed(server: Any, model: str) -> int:
    """Speech requests this Triton generated to their end, by its own metrics (the scheduler's
    tts_generation_requests_total; health probes are answered before the scheduler, so they are not
    in it)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(server.metrics_url, timeout=10).text
    return int(sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
                   if s.name == "tts_generation_requests_total" and s.labels.get("outcome") == "completed"
                   and s.labels.get("model") == model))


def ready_body(url: str) -> dict:
    try:
        r = httpx.get(url + "/ready", timeout=5)
    except httpx.HTTPError:
        return {}
    return r.json()


@pytest.fixture(scope="module")
def cluster(triton_server, tmp_path_factory, tiny_custom_voice_greedy, tiny_base_greedy):
    from gateway_fixtures import render_stack_repository

    work = tmp_path_factory.mktemp("multi-replica")
    repo, cfg = render_stack_repository(work, [(t[0], t[1]) for t in (tiny_custom_voice_greedy, tiny_base_greedy)],
                                        max_active=4)
    tritons = [triton_server(repo, ready_timeout_s=240) for _ in range(2)]
    cfg.pop("triton_url", None)
    cfg["triton_urls"] = [t.grpc_url for t in tritons]
    cfg["speaker_samples_dir"] = str(work / "shared-voices")
    cfg["speaker_sync_interval_s"] = 0.5
    gateways = []
    for name, reload in (("a", True), ("b", False)):  # one replica repairs broken models, as documented
        path = work / f"gateway-{name}.json"
        path.write_text(json.dumps({**cfg, "health_reload": reload}, indent=2))
        gateways.append(GatewayProcess(path, work / f"gateway-{name}.log"))
    try:
        for g in gateways:
            g.start(120)
        for g in gateways:
            wait_until(lambda g=g: ready_body(g.url).get("status") == "ready", 120, f"{g.url}/ready", logs=[g])
        names = {m["variant"]: m["name"] for m in cfg["models"]}
        triton_models = {m["variant"]: m["triton_model"] for m in cfg["models"]}
        yield {"tritons": tritons, "gateways": gateways, "names": names, "triton_models": triton_models, "cfg": cfg}
    finally:
        for g in gateways:
            g.stop()


def test_both_gateways_see_both_endpoints(cluster):
    for g in cluster["gateways"]:
        endpoints = ready_body(g.url)["endpoints"]
        assert sorted(endpoints) == sorted(t.grpc_url for t in cluster["tritons"])
        assert all(e["serving"] for e in endpoints.values()), endpoints


def test_a_voice_uploaded_on_one_gateway_speaks_on_the_other(cluster):
    a, b = cluster["gateways"]
    base = cluster["names"]["base"]
    r = httpx.post(a.url + VOICES, files={"audio_sample": ("me.wav", wav(1.5), "audio/wav")},
                   data={"consent": "yes", "name": "shared_me", "ref_text": "My own voice."}, timeout=60)
    assert r.status_code == 200, r.text
    spoken = httpx.post(b.url + SPEECH, json={"model": base, "input": "Said through B.", "voice": "shared_me",
                                              "max_new_tokens": 8}, timeout=60)
    assert spoken.status_code == 200 and spoken.content[:4] == b"RIFF", spoken.text
    assert "shared_me" in httpx.get(b.url + VOICES, timeout=10).json()["voices"]

    deleted = httpx.delete(b.url + VOICES + "/shared_me", timeout=10)
    assert deleted.status_code == 200, deleted.text
    gone = httpx.post(a.url + SPEECH, json={"model": base, "input": "Gone?", "voice": "shared_me",
                                            "max_new_tokens": 8}, timeout=60)
    # (to a Base model a name that is no voice is no cloning reference: the spec's 400)
    assert gone.status_code == 400 and gone.json()["error"]["type"] == "BadRequestError", gone.text
    wait_until(lambda: "shared_me" not in httpx.get(a.url + VOICES, timeout=10).json()["voices"], 5,
               "the delete on B to reach A's listing", logs=[a, b])
    print("\nvoice uploaded on A spoke on B; deleted on B, refused on A at once")


def test_load_spreads_then_a_killed_triton_loses_no_request_without_audio(cluster):
    tritons, gateways = cluster["tritons"], cluster["gateways"]
    triton_model = cluster["triton_models"]["custom_voice"]
    urls = [g.url for g in gateways]
    model = cluster["names"]["custom_voice"]

    # 1. Spread: a bounded run, counted by each Triton.
    before = [completed(t, triton_model) for t in tritons]
    spread = Load(urls, model, limit=SPREAD_REQUESTS)
    spread.run()
    spread.join(CLIENT_TIMEOUT_S * SPREAD_REQUESTS / CLIENTS)
    assert all(o.ok for o in spread.outcomes), [o.error for o in spread.outcomes if not o.ok]

    def served() -> list[int]:
        return [completed(t, triton_model) - b for t, b in zip(tritons, before, strict=True)]

    # Triton publishes the model's metrics every 0.5 s.
    def all_counted() -> list[int] | None:
        n = served()
        return n if sum(n) >= SPREAD_REQUESTS else None

    counted = poll(all_counted, 10) or served()
    assert sum(counted) == SPREAD_REQUESTS, counted  # each request ran once, on one Triton
    shares = [n / SPREAD_REQUESTS for n in counted]
    print(f"\nspread: {SPREAD_REQUESTS} streaming requests over 2 gateways, {CLIENTS} clients -> completed per "
          f"Triton {counted} (shares {shares[0]:.2f} / {shares[1]:.2f})")
    assert min(shares) >= 0.3, counted

    # 2. Kill one Triton under load.
    load = Load(urls, model)
    load.run()
    time.sleep(KILL_AFTER_S)
    victim = tritons[0]
    os.kill(victim.pid, signal.SIGKILL)
    killed = time.monotonic()
    out_after: dict[str, float] = {}

    def out_everywhere() -> bool:
        for g in gateways:
            if g.url not in out_after:
                ep = ready_body(g.url).get("endpoints", {}).get(victim.grpc_url)
                if ep is not None and not ep["serving"]:
                    out_after[g.url] = time.monotonic() - killed
        return len(out_after) == len(gateways)

    poll(out_everywhere, OUT_WITHIN_S, step=0.02)
    time.sleep(max(0.0, LOAD_AFTER_KILL_S - (time.monotonic() - killed)))
    load.stop.set()
    load.join(CLIENT_TIMEOUT_S)

    outcomes = load.outcomes
    before_kill = [o for o in outcomes if o.started_at < killed]
    after_kill = [o for o in outcomes if o.started_at >= killed]
    in_flight = [o for o in before_kill if o.ended_at >= killed]
    # Surely without audio when the Triton died: none yet a moment after the kill (a chunk Triton sent
    # just before it may reach the client a little after), so they ran, or were retried, elsewhere.
    without_audio = [o for o in in_flight if o.first_audio_at is None or o.first_audio_at >= killed + IN_TRANSIT_S]
    failed = [o for o in outcomes if not o.ok]
    from prometheus_text import parse

    failed_on_victim = 0  # Triton requests that failed on the dead endpoint, by the gateways' own count
    for g in gateways:
        for (name, labels), value in parse(httpx.get(g.url + "/metrics", timeout=10).text).items():
            if name == "tts_triton_endpoint_errors_total" and dict(labels)["endpoint"] == victim.grpc_url:
                failed_on_victim += int(value)
    print(f"kill: {len(outcomes)} requests ({len(before_kill)} before the kill, {len(in_flight)} of them in flight, {len(without_audio)} of those "
          f"without audio yet; "
          f"{len(after_kill)} after); errors: {len(failed)} (all in-band, after audio: "
          f"{sum(1 for o in failed if o.audio > 0)}); dead endpoint out of /ready after "
          + ", ".join(f"{v:.2f} s" for v in sorted(out_after.values()))
          + f"; Triton requests failed on the dead endpoint: {failed_on_victim} "
          f"({failed_on_victim - len(failed)} of them retried on the other before any audio, successfully)")
    assert len(out_after) == len(gateways), f"the dead endpoint was not out everywhere within {OUT_WITHIN_S} s"
    assert after_kill, "no load after the kill"
    for o in failed:
        # The only failures allowed: a stream that had audio when its Triton died, ended cleanly in-band.
        assert o.audio > 0 and o.started_at < killed and o.status == 200 and o.error.startswith("{"), vars(o)
    assert all(o.ok for o in after_kill) and all(o.ok for o in without_audio)
    assert all(o.ended_at - o.started_at < CLIENT_TIMEOUT_S for o in outcomes)
    assert completed(tritons[1], triton_model) > before[1] + counted[1]  # the survivor took the load
    for g in gateways:
        body = ready_body(g.url)
        assert body["status"] == "ready" and body["endpoints"][tritons[1].grpc_url]["serving"], body
