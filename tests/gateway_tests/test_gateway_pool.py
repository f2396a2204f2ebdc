"""gateway.pool: several Triton endpoints as one backend, over fakes of the endpoints (unit level; the
real thing is tests/e2e_tests/test_multi_replica.py). Balancing by outstanding requests per model, failover
before the first chunk only, endpoints out and back in, DNS endpoints added and retired, the per
endpoint health monitors, WebSocket utterances kept on one endpoint, /ready and /metrics."""

from __future__ import annotations

import asyncio
import json
from contextlib import aclosing
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient
from gateway_fixtures import FakeBackend, fake_deployment
from prometheus_text import parse

from gateway.app import create_app
from gateway.backend import (
    ENDPOINT_AFFINITY,
    INTERNAL,
    INVALID_ARG,
    UNAVAILABLE,
    Affinity,
    BackendError,
    ProbeResult,
    SpeechChunk,
)
from gateway.health import InflightStreams
from gateway.monitor import HealthMonitor
from gateway.pool import Target, TritonPool, pool_from_settings
from gateway.settings import Settings, SettingsError, parse_url_list
from ttscore.contract import tensors as triton_io

pytestmark = pytest.mark.gateway

MODEL = "speech_generation"


def parse_metrics(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for (name, labels), value in parse(text).items():
        out.setdefault(name, []).append((dict(labels), value))
    return out


def inputs(text: str = "Hello there.", frames: int = 3) -> dict:
    return triton_io.request_tensors(text=text, speaker="vivian", max_new_tokens=frames)


@dataclass
class Endpoint(FakeBackend):
    """A fake Triton endpoint; `fail_after_first`: the stream dies (UNAVAILABLE) after one chunk."""

    fail_after_first: bool = False
    gate: asyncio.Event | None = None  # streams wait on it before their first chunk
    attempts: int = 0  # streams opened (a stream ended at the gate records no call)

    async def stream_speech(self, model, tensors, request_id):
        self.attempts += 1
        if self.gate is not None:
            await self.gate.wait()
        n = 0
        async for chunk in super().stream_speech(model, tensors, request_id):
            yield chunk
            n += 1
            if self.fail_after_first:
                raise BackendError(UNAVAILABLE, "the inference server is unreachable")


def make_pool(n: int = 2, **kw) -> tuple[TritonPool, dict[str, Endpoint]]:
    fakes: dict[str, Endpoint] = {}

    def backend(url: str) -> Endpoint:
        fakes[url] = Endpoint()
        return fakes[url]

    targets = [Target(f"10.0.0.{i + 1}", 8001) for i in range(n)]
    pool = TritonPool(targets, backend, models=[MODEL], **kw)
    return pool, fakes


async def drain(pool: TritonPool, text: str = "Hello there.", model: str = MODEL) -> list[SpeechChunk]:
    async with aclosing(pool.stream_speech(model, inputs(text), "rid")) as stream:
        return [c async for c in stream]


def counts(fakes: dict[str, Endpoint]) -> dict[str, int]:
    return {url: len(f.calls) for url, f in fakes.items()}


# --- settings ---------------------------------------------------------------------------------------


def test_settings_take_one_url_or_a_list(tmp_path):
    one = fake_deployment(tmp_path, ("custom_voice",), triton_url="10.1.1.1:8001")
    assert one.endpoints() == ("10.1.1.1:8001",)
    raw = json.loads(json.dumps({"models": [{"name": m.name, "variant": m.variant, "triton_model": m.triton_model,
                                             "artifacts_dir": str(m.artifacts_dir)} for m in one.models]}))
    s = Settings.from_dict({**raw, "triton_urls": ["triton-0:8001", "[::1]:8002", "triton.ns.svc:8001"]})
    assert s.endpoints() == ("triton-0:8001", "[::1]:8002", "triton.ns.svc:8001")
    with pytest.raises(SettingsError, match="not both"):
        Settings.from_dict({**raw, "triton_url": "a:1", "triton_urls": ["b:1"]})
    for bad in (["nohost"], ["a:99999"], "a:1", [], ["a:1", "a:1"], ["a b:1"]):
        with pytest.raises(SettingsError, match="triton_url|Triton endpoint"):
            Settings.from_dict({**raw, "triton_urls": bad})
    assert parse_url_list(" a:1, b:2 ,,") == ("a:1", "b:2")


def test_pool_from_settings_resolves_names_and_keeps_literals(tmp_path):
    settings = fake_deployment(tmp_path, ("custom_voice",))
    s = Settings.from_dict({
        "models": [{"name": m.name, "variant": m.variant, "triton_model": m.triton_model,
                    "artifacts_dir": str(m.artifacts_dir)} for m in settings.models],
        "triton_urls": ["127.0.0.1:9001", "localhost:9002"], "readiness_models": ["code2wav"],
    })
    made: list[str] = []
    pool = pool_from_settings(s, lambda url: made.append(url) or FakeBackend())  # type: ignore[func-returns-value]
    assert made == ["127.0.0.1:9001"]  # the name waits for start()
    assert pool.stream_models == ("code2wav",) and pool.models == [MODEL, "code2wav"]

    async def run():
        await pool.start()
        try:
            return sorted(pool.endpoints)
        finally:
            await pool.close()

    urls = asyncio.run(run())
    assert "127.0.0.1:9001" in urls and "127.0.0.1:9002" in urls  # localhost -> its IPv4 address


# --- balancing ----------------------------------------------------------------------------------------


def test_sequential_requests_alternate_and_concurrent_ones_spread():
    async def run():
        pool, fakes = make_pool(2)
        for _ in range(6):
            assert (await drain(pool))[-1].final
        sequential = counts(fakes)
        gate = asyncio.Event()
        for f in fakes.values():
            f.gate = gate
        tasks = [asyncio.create_task(drain(pool)) for _ in range(6)]
        await asyncio.sleep(0.05)
        outstanding = {ep.url: ep.outstanding[MODEL] for ep in pool.endpoints.values()}
        gate.set()
        await asyncio.gather(*tasks)
        return sequential, outstanding, counts(fakes)

    sequential, outstanding, total = asyncio.run(run())
    assert sequential == {"10.0.0.1:8001": 3, "10.0.0.2:8001": 3}
    assert outstanding == {"10.0.0.1:8001": 3, "10.0.0.2:8001": 3}
    assert total == {"10.0.0.1:8001": 6, "10.0.0.2:8001": 6}


def test_fewest_outstanding_counts_per_model():
    async def run():
        pool, fakes = make_pool(2)
        a, b = pool.endpoints.values()
        a.outstanding["other_model"] = 5  # busy with another model: does not count against this one ...
        b.outstanding[MODEL] = 1  # ... while one request of this model does
        await drain(pool)
        return counts(fakes)

    assert asyncio.run(run()) == {"10.0.0.1:8001": 1, "10.0.0.2:8001": 0}


# --- failover -------------------------------------------------------------------------------------------


def test_failure_before_the_first_chunk_is_retried_on_another_endpoint_and_takes_it_out():
    async def run():
        pool, fakes = make_pool(2)
        a, b = fakes.values()
        a.ready = False  # answers every stream with UNAVAILABLE
        results = [await drain(pool) for _ in range(4)]
        up = {ep.url: ep.up for ep in pool.endpoints.values()}
        stats = {s.endpoint: s for s in pool.stats()}
        return results, counts(fakes), up, stats, dict(pool.retries)

    results, calls, up, stats, retries = asyncio.run(run())
    assert all(r[-1].final for r in results)
    # The first request tried A, failed, went to B; A was out from then on.
    assert calls == {"10.0.0.1:8001": 1, "10.0.0.2:8001": 4}
    assert up == {"10.0.0.1:8001": False, "10.0.0.2:8001": True}
    assert retries == {MODEL: 1}
    assert stats["10.0.0.1:8001"].errors == {(MODEL, UNAVAILABLE): 1} and not stats["10.0.0.1:8001"].up


def test_failure_after_audio_is_never_retried():
    async def run():
        pool, fakes = make_pool(2)
        for f in fakes.values():
            f.fail_after_first = True
        got: list[SpeechChunk] = []
        with pytest.raises(BackendError) as err:
            async with aclosing(pool.stream_speech(MODEL, inputs(frames=8), "rid")) as stream:
                async for chunk in stream:
                    got.append(chunk)
        return got, err.value, counts(fakes)

    got, err, calls = asyncio.run(run())
    assert len(got) == 1 and err.code == UNAVAILABLE
    assert sorted(calls.values()) == [0, 1]  # one endpoint, one attempt


def test_errors_of_the_request_are_not_retried():
    async def run():
        pool, fakes = make_pool(2)
        with pytest.raises(BackendError) as err:
            await drain(pool, "fail-invalid")
        return err.value.code, counts(fakes), [ep.up for ep in pool.endpoints.values()]

    got, calls, up = asyncio.run(run())
    assert got == INVALID_ARG and sorted(calls.values()) == [0, 1] and up == [True, True]


def test_internal_before_audio_is_retried_once_and_keeps_the_endpoint_in():
    async def run():
        pool, fakes = make_pool(2)
        with pytest.raises(BackendError) as err:
            await drain(pool, "fail-internal")  # every endpoint fails it: two attempts, then the error
        return err.value.code, counts(fakes), [ep.up for ep in pool.endpoints.values()], dict(pool.retries)

    got, calls, up, retries = asyncio.run(run())
    assert got == INTERNAL and sorted(calls.values()) == [1, 1] and up == [True, True]
    assert retries == {MODEL: 1}


def test_no_endpoint_serving_fails_fast_naming_each():
    async def run():
        pool, fakes = make_pool(2)
        for f in fakes.values():
            f.ready = False
        with pytest.raises(BackendError) as first:
            await drain(pool)
        with pytest.raises(BackendError) as later:
            await drain(pool)
        return first.value, later.value, counts(fakes)

    first, later, calls = asyncio.run(run())
    assert first.code == UNAVAILABLE and later.code == UNAVAILABLE
    # Both out now: a request still tries the best one (one attempt, no retry), and fails fast.
    assert sum(calls.values()) == 3


def test_an_endpoint_out_is_probed_back_in():
    async def run():
        pool, fakes = make_pool(2)
        a, b = fakes.values()
        a.ready = False
        await drain(pool)
        await pool.check()
        out = [ep.up for ep in pool.endpoints.values()]
        a.ready = True
        await pool.check()
        back = [ep.up for ep in pool.endpoints.values()]
        before = len(a.calls)
        for _ in range(4):
            await drain(pool)
        return out, back, len(a.calls) - before

    out, back, used = asyncio.run(run())
    assert out == [False, True] and back == [True, True] and used == 2


def test_unary_inference_is_balanced_and_retried():
    async def run():
        pool, fakes = make_pool(2)
        np = __import__("numpy")
        inputs = {"audio": np.zeros(24000, "float32"), "sample_rate": np.array([24000], np.int32)}
        for _ in range(4):
            await pool.infer("voice_features", inputs, "rid")
        spread = {u: len(f.feature_calls) for u, f in fakes.items()}
        next(iter(fakes.values())).ready = False
        for _ in range(2):
            await pool.infer("voice_features", inputs, "rid")
        return spread, {u: len(f.feature_calls) for u, f in fakes.items()}

    spread, after = asyncio.run(run())
    assert spread == {"10.0.0.1:8001": 2, "10.0.0.2:8001": 2}
    assert after == {"10.0.0.1:8001": 3, "10.0.0.2:8001": 4}  # A failed once (retried on B), then was out


def test_affinity_keeps_calls_on_one_endpoint():
    async def run():
        pool, fakes = make_pool(2)
        affinity = Affinity()
        token = ENDPOINT_AFFINITY.set(affinity)
        try:
            for _ in range(4):
                await drain(pool)
            kept = counts(fakes)
            fakes[affinity.endpoint].ready = False  # its endpoint goes down: moves on, and stays there
            for _ in range(3):
                await drain(pool)
        finally:
            ENDPOINT_AFFINITY.reset(token)
        return kept, affinity.endpoint, counts(fakes)

    kept, now, after = asyncio.run(run())
    assert sorted(kept.values()) == [0, 4]
    assert after[now] == 3 and sum(after.values()) == 8


# --- DNS ----------------------------------------------------------------------------------------------


def test_names_resolve_to_one_endpoint_per_address_and_follow_dns():
    answers = [["10.0.0.1"], ["10.0.0.1", "10.0.0.2"], OSError("lookup failed"), ["10.0.0.2"]]

    async def resolver(host: str, port: int) -> list[str]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def run():
        made: dict[str, Endpoint] = {}
        pool = TritonPool([Target("triton-headless", 8001)], lambda u: made.setdefault(u, Endpoint()),
                          models=[MODEL], resolver=resolver)
        seen = []
        for _ in range(4):
            await pool.resolve()
            seen.append(sorted(pool.endpoints))
        return seen, made, pool

    seen, made, pool = asyncio.run(run())
    assert seen == [["10.0.0.1:8001"], ["10.0.0.1:8001", "10.0.0.2:8001"], ["10.0.0.1:8001", "10.0.0.2:8001"],
                    ["10.0.0.2:8001"]]
    assert made["10.0.0.1:8001"].closed and not made["10.0.0.2:8001"].closed


def test_a_retired_endpoint_finishes_its_streams_before_it_is_closed():
    answers = [["10.0.0.1"], ["10.0.0.2"]]

    async def resolver(host: str, port: int) -> list[str]:
        return answers.pop(0)

    async def run():
        made: dict[str, Endpoint] = {}
        gate = asyncio.Event()

        def backend(url: str) -> Endpoint:
            made[url] = Endpoint(gate=gate)
            return made[url]

        pool = TritonPool([Target("triton", 8001)], backend, models=[MODEL], resolver=resolver)
        await pool.resolve()
        task = asyncio.create_task(drain(pool))
        await asyncio.sleep(0.01)
        await pool.resolve()  # 10.0.0.1 leaves DNS while its stream runs
        closed_early = made["10.0.0.1:8001"].closed
        gate.set()
        chunks = await task
        await pool.resolve() if answers else await pool.check()
        return closed_early, chunks, made["10.0.0.1:8001"].closed

    closed_early, chunks, closed = asyncio.run(run())
    assert not closed_early and chunks[-1].final and closed


# --- health per endpoint ------------------------------------------------------------------------------


def monitored_pool(n: int = 2) -> tuple[TritonPool, dict[str, Endpoint]]:
    def factory(backend, inflight: InflightStreams) -> HealthMonitor:
        return HealthMonitor(backend, [MODEL], inflight, reload=False)

    return make_pool(n, monitor_factory=factory)


def test_a_model_broken_on_one_endpoint_moves_its_unstarted_streams_and_keeps_readiness():
    async def run():
        pool, fakes = monitored_pool(2)
        a, b = fakes.values()
        gate = asyncio.Event()
        a.gate = gate  # A's stream is admitted but has no audio yet
        task = asyncio.create_task(drain(pool))
        await asyncio.sleep(0.01)
        a.probe_results[MODEL] = ProbeResult("failed", "Stub process is not healthy.")
        await pool.check()  # A's monitor ends A's stream; it had no audio, so it runs on B
        chunks = await task
        a.gate = None
        unusable = pool.unusable()
        status = pool.endpoint_status()
        ready = await pool.model_ready(MODEL)
        b.probe_results[MODEL] = ProbeResult("failed", "Stub process is not healthy.")
        await pool.check()
        return chunks, {u: f.attempts for u, f in fakes.items()}, unusable, status, ready, pool.unusable()

    chunks, attempts, unusable, status, ready, both = asyncio.run(run())
    assert chunks[-1].final and attempts == {"10.0.0.1:8001": 1, "10.0.0.2:8001": 1}
    assert unusable == {} and ready is True
    assert status["10.0.0.1:8001"]["serving"] is False and "not healthy" in status["10.0.0.1:8001"]["reason"]
    assert status["10.0.0.2:8001"]["serving"] is True
    assert set(both) == {MODEL}
    assert "10.0.0.1:8001: " in both[MODEL] and "10.0.0.2:8001: " in both[MODEL]


def test_one_endpoint_reports_its_monitor_verdicts_unchanged():
    async def run():
        pool, fakes = monitored_pool(1)
        fakes["10.0.0.1:8001"].probe_results[MODEL] = ProbeResult("failed", "Stub process is not healthy.")
        await pool.check()
        return pool.unusable()

    assert asyncio.run(run()) == {MODEL: "Stub process is not healthy."}


# --- the app over a pool ----------------------------------------------------------------------------------


def app_over_pool(tmp_path, fakes: dict[str, Endpoint]):
    settings = fake_deployment(tmp_path, ("custom_voice",), health_interval_s=0,
                               triton_urls=["10.0.0.1:8001", "10.0.0.2:8001"])

    def backend(url: str) -> Endpoint:
        fakes[url] = Endpoint()
        return fakes[url]

    return TestClient(create_app(settings, backend_factory=backend), raise_server_exceptions=False)


def test_app_ready_metrics_and_failover(tmp_path):
    fakes: dict[str, Endpoint] = {}
    with app_over_pool(tmp_path, fakes) as client:
        r = client.get("/ready")
        assert r.status_code == 200
        assert r.json()["endpoints"] == {u: {"serving": True, "reason": None, "outstanding": 0} for u in fakes}
        fakes["10.0.0.1:8001"].ready = False
        for _ in range(3):  # the first goes to A (readiness was checked just before), fails, runs on B
            r = client.post("/v1/audio/speech", json={"input": "Hi.", "voice": "vivian", "max_new_tokens": 3})
            assert r.status_code == 200, r.text
        r = client.get("/ready")
        assert r.status_code == 200  # one endpoint serves every model
        assert r.json()["endpoints"]["10.0.0.1:8001"]["serving"] is False
        fakes["10.0.0.2:8001"].ready = False
        r = client.get("/ready")
        assert r.status_code == 503 and not any(e["serving"] for e in r.json()["endpoints"].values())
        r = client.post("/v1/audio/speech", json={"input": "Hi.", "voice": "vivian", "max_new_tokens": 3})
        assert r.status_code == 503 and r.json()["error"]["code"] == 503
        metrics = parse_metrics(client.get("/metrics").text)
    up = {labels["endpoint"]: v for labels, v in metrics["tts_triton_endpoint_up"]}
    assert up == {"10.0.0.1:8001": 0.0, "10.0.0.2:8001": 0.0}
    requests = {labels["endpoint"]: v for labels, v in metrics["tts_triton_endpoint_requests_total"]}
    assert requests["10.0.0.2:8001"] >= 3
    outstanding = [v for _, v in metrics["tts_triton_endpoint_outstanding"]]
    assert outstanding and all(v == 0 for v in outstanding)
    assert any(labels["code"] == UNAVAILABLE for labels, _ in metrics["tts_triton_endpoint_errors_total"])


def test_websocket_utterance_stays_on_one_endpoint(tmp_path):
    fakes: dict[str, Endpoint] = {}
    with app_over_pool(tmp_path, fakes) as client, client.websocket_connect("/v1/audio/speech/stream") as ws:
        ws.send_json({"type": "session.config", "voice": "vivian", "max_new_tokens": 3,
                      "split_granularity": "sentence"})
        for _ in range(2):
            ws.send_json({"type": "input.text", "text": "One. Two. Three. Four."})
            ws.send_json({"type": "input.done"})
            while True:
                m = ws.receive()
                if m.get("text") and json.loads(m["text"])["type"] == "session.done":
                    break
    per_utterance: dict[str, set[str]] = {}
    for url, f in fakes.items():
        for call in f.calls:
            per_utterance.setdefault(call.request_id.split("-s")[0], set()).add(url)
    assert len(per_utterance) == 2 and all(len(urls) == 1 for urls in per_utterance.values()), per_utterance
    assert sum(len(f.calls) for f in fakes.values()) == 8
