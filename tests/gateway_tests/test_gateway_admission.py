"""Admission control (gateway.admission): the pure bounds, then through the gateway over a fake Triton: a request
that cannot be admitted gets 503 (429 for its API key's limit) + Retry-After and the error body before any Triton
work, a WebSocket session the in-band error (and it goes on), /ready and /metrics the queue depth and refusals."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
from gateway_fixtures import NAMES, FakeBackend, fake_deployment, start_gateway
from prometheus_text import parse, sample

from gateway import errors
from gateway.admission import Admission, AdmissionLimits
from gateway.errors import APIError
from ttscore.backend.triton_server import free_port

pytestmark = pytest.mark.gateway

SPEECH = "/v1/audio/speech"
CV = NAMES["custom_voice"]
VD = NAMES["voice_design"]


# --- the bounds, pure --------------------------------------------------------------------------------


def run(coro):
    return asyncio.run(coro)


def test_running_then_queued_then_refused_and_a_release_starts_the_first_waiter():
    async def scenario():
        adm = Admission(AdmissionLimits(model_running=1, model_queued=1, running=0, queued=0), ["a"], 3)
        first = await adm.acquire("a")
        waiting = asyncio.ensure_future(adm.acquire("a"))
        await asyncio.sleep(0)
        assert not waiting.done() and adm.status()["queued"] == 1
        with pytest.raises(APIError) as refused:
            await adm.acquire("a")
        assert refused.value.status == 503 and refused.value.headers == {"Retry-After": "3"}
        first.release()
        first.release()  # idempotent
        second = await asyncio.wait_for(waiting, 1)
        assert adm.status()["running"] == 1 and adm.status()["queued"] == 0
        second.release()
        return adm.snapshot()["a"]

    load = run(scenario())
    assert (load.running, load.queued, load.refused) == (0, 0, {"queue_full": 1})


def test_the_deployment_bound_holds_across_models_and_a_freed_slot_goes_to_the_first_that_can_run():
    async def scenario():
        adm = Admission(AdmissionLimits(model_running=1, model_queued=4, running=2, queued=4), ["a", "b", "c"], 5)
        a1, b1 = await adm.acquire("a"), await adm.acquire("b")
        a2 = asyncio.ensure_future(adm.acquire("a"))  # its model is full
        c1 = asyncio.ensure_future(adm.acquire("c"))  # the deployment is full
        await asyncio.sleep(0)
        assert not a2.done() and not c1.done()
        b1.release()  # a deployment slot: "a" still is at its bound, "c" behind it can go
        got = await asyncio.wait_for(c1, 1)
        assert not a2.done()
        a1.release()
        a2_ticket = await asyncio.wait_for(a2, 1)
        for t in (got, a2_ticket):
            t.release()
        return adm.status()

    status = run(scenario())
    assert (status["running"], status["queued"], status["refused"]) == (0, 0, 0)


def test_a_queue_wait_bound_refuses_the_waiter_and_a_cancelled_waiter_leaves_the_queue():
    async def scenario():
        adm = Admission(AdmissionLimits(model_running=1, model_queued=2, queue_wait_s=0.05), ["a"], 1)
        held = await adm.acquire("a")
        with pytest.raises(APIError) as late:
            await adm.acquire("a")
        gone = asyncio.ensure_future(adm.acquire("a"))
        await asyncio.sleep(0)
        gone.cancel()
        with pytest.raises(asyncio.CancelledError):
            await gone
        assert adm.status()["queued"] == 0
        held.release()
        return late.value, adm.snapshot()["a"]

    late, load = run(scenario())
    assert late.status == 503 and "waited 0.05 s" in late.message
    assert (load.running, load.queued, load.refused) == (0, 0, {"queue_timeout": 1})


def test_a_request_whose_estimated_wait_exceeds_the_bound_is_refused_at_once():
    now = [0.0]
    adm = Admission(AdmissionLimits(model_running=2, model_queued=8, queue_wait_s=1.5), ["a"], 1, clock=lambda: now[0])

    async def scenario():
        first, second = await adm.acquire("a"), await adm.acquire("a")
        assert adm.expected_wait("a") is None  # nothing measured: no estimate, the queue's bounds only
        now[0] = 1.0
        first.release()  # a generation of 1 s: slots free up at 2 per second
        first = await adm.acquire("a")
        waiting = [asyncio.ensure_future(adm.acquire("a")) for _ in range(2)]  # waits of ~0.5 s and ~1.0 s
        await asyncio.sleep(0)
        assert adm.expected_wait("a") == pytest.approx(1.5)
        third = asyncio.ensure_future(adm.acquire("a"))  # 1.5 s: still within the bound
        await asyncio.sleep(0)
        started = asyncio.get_running_loop().time()
        with pytest.raises(APIError) as refused:
            await adm.acquire("a")  # 2 s > 1.5 s: no waiting
        assert asyncio.get_running_loop().time() - started < 0.5
        for t in [first, second]:
            t.release()
        for w in [*waiting, third]:
            (await w).release() if w.done() else w.cancel()
        return refused.value

    refused = run(scenario())
    assert refused.status == 503 and "about 2.0 s" in refused.message and "1.5 s" in refused.message
    assert adm.snapshot()["a"].refused == {"queue_estimate": 1}


def test_a_batch_item_waits_its_turn_where_a_stream_would_be_refused_for_time():
    now = [0.0]
    adm = Admission(AdmissionLimits(model_running=1, model_queued=4, queue_wait_s=0.05), ["a"], 1, clock=lambda: now[0])

    async def scenario():
        first = await adm.acquire("a")
        now[0] = 1.0
        first.release()  # a generation of 1 s: a queued one would wait ~1 s, 20x the bound
        held = await adm.acquire("a")
        with pytest.raises(APIError) as stream:
            await adm.acquire("a")
        with adm.patient():
            item = asyncio.ensure_future(adm.acquire("a"))  # (the task keeps the context it was made in)
        await asyncio.sleep(0.2)  # 4x the queue-time bound
        assert not item.done() and adm.status()["queued"] == 1
        held.release()
        (await asyncio.wait_for(item, 1)).release()
        return stream.value

    refused = run(scenario())
    assert refused.status == 503 and "about 1.0 s" in refused.message
    assert adm.snapshot()["a"].refused == {"queue_estimate": 1}


def test_a_stream_that_cannot_run_is_refused_at_once_unless_streams_queue():
    async def scenario(queue_streams: bool):
        adm = Admission(AdmissionLimits(model_running=1, model_queued=4, queue_streams=queue_streams), ["a"], 2)
        running = await adm.acquire("a", stream=True)
        whole = asyncio.ensure_future(adm.acquire("a"))  # a whole-file request queues either way
        await asyncio.sleep(0)
        outcome: object
        try:
            outcome = await asyncio.wait_for(adm.acquire("a", stream=True), 0.05)
        except APIError as exc:
            outcome = exc
        except asyncio.TimeoutError:
            outcome = "queued"
        with adm.patient():  # a batch's item waits its turn, whatever it was taken as
            item = asyncio.ensure_future(adm.acquire("a", stream=True))
        await asyncio.sleep(0)
        queued = adm.status()["queued"]
        for task in (whole, item):
            task.cancel()
        await asyncio.gather(whole, item, return_exceptions=True)
        running.release()
        return outcome, queued, adm.snapshot()["a"].refused

    refused, queued, reasons = run(scenario(False))
    assert isinstance(refused, APIError) and refused.status == 503 and refused.headers == {"Retry-After": "2"}
    assert "is busy and a stream is not queued" in refused.message and "'a'" in refused.message
    assert queued == 2 and reasons == {"no_slot": 1}  # the whole-file request and the batch item
    assert run(scenario(True))[0] == "queued"


def test_a_queued_ticket_the_body_did_not_call_a_stream_is_decided_again_when_its_plan_streams():
    async def scenario():
        adm = Admission(AdmissionLimits(model_running=1, model_queued=4, queue_streams=False), ["a"], 1)
        running = await adm.acquire("a")
        ticket = adm.take("a")  # the HTTP layer's decision: queued (the body did not ask for a stream)
        with adm.taken(ticket), pytest.raises(APIError) as refused:
            await adm.acquire("a", stream=True)  # its plan streams: it does not wait
        running.release()
        return refused.value, adm.status()

    refused, status = run(scenario())
    assert refused.status == 503 and status["queued"] == 0 and status["models"]["a"]["refused"] == 1


def test_a_key_over_its_limit_gets_429_whatever_the_queue_and_other_keys_go_on():
    async def scenario():
        adm = Admission(AdmissionLimits(per_key=1), ["a"], 2)
        mine = await adm.acquire("a", "k1")
        with pytest.raises(APIError) as refused:
            await adm.acquire("a", "k1")
        other = await adm.acquire("a", "k2")
        mine.release()
        again = await adm.acquire("a", "k1")
        for t in (other, again):
            t.release()
        return refused.value

    refused = run(scenario())
    assert refused.status == 429 and refused.type == "RateLimitError" and refused.headers == {"Retry-After": "2"}


def test_zero_means_no_bound():
    async def scenario():
        adm = Admission(AdmissionLimits(model_running=0, model_queued=0, running=0, queued=0), ["a"], 1)
        tickets = [await adm.acquire("a", "k") for _ in range(100)]
        assert adm.status()["running"] == 100
        for t in tickets:
            t.release()

    run(scenario())


def test_the_refusals_are_built_where_every_error_is():
    assert errors.overloaded("full", 4).body()["error"] == {"message": "full", "type": "ServiceUnavailableError",
                                                             "param": None, "code": 503}
    assert errors.rate_limited("busy", 4).body()["error"]["code"] == 429


# --- through the gateway ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    """A gateway whose models run one generation each and queue one more; the deployment two and two; a key one."""
    import gateway.app as app_module

    settings = fake_deployment(tmp_path_factory.mktemp("adm"), max_running_per_model=1, max_queued_per_model=1,
                               max_running=2, max_queued=2, max_concurrent_per_key=2,
                               api_keys=["key-a", "key-b"], health_interval_s=0)
    fake = FakeBackend()
    original = app_module._triton_backend
    app_module._triton_backend = lambda s: (lambda url: fake)
    port = free_port()
    try:
        server, thread = start_gateway(settings, port)
    finally:
        app_module._triton_backend = original
    yield f"http://127.0.0.1:{port}", fake
    server.should_exit = True
    thread.join(10)


def auth(key: str = "key-a") -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def _wait_until(predicate, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


def test_a_full_queue_refuses_at_once_with_503_before_any_triton_work_and_serves_again_after(gateway):
    url, fake = gateway

    async def scenario():
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            calls = len(fake.calls)
            hung = [asyncio.ensure_future(http.post(SPEECH, json={"input": "hang", "model": CV}, headers=auth(k)))
                    for k in ("key-a", "key-b")]  # one runs (it never answers), one waits its turn
            await _wait_until(lambda: len(fake.calls) == calls + 1)
            ready = (await http.get("/ready")).json()["admission"]
            started = time.monotonic()
            refused = await http.post(SPEECH, json={"input": "Hello.", "model": CV}, headers=auth("key-b"))
            took = time.monotonic() - started
            metrics = parse((await http.get("/metrics")).text)
            after_ready = (await http.get("/ready")).json()["admission"]
            for task in hung:  # the clients go away: their generations end
                task.cancel()
            await asyncio.gather(*hung, return_exceptions=True)
            await _wait_until(lambda: fake.calls[-1].cancelled)
            await asyncio.sleep(0.1)
            ok = await http.post(SPEECH, json={"input": "Hello.", "model": CV}, headers=auth())
            return ready, refused, took, metrics, after_ready, ok, [c.fields["text"] for c in fake.calls[calls:]]

    ready, refused, took, metrics, after_ready, ok, texts = run(scenario())
    assert ready["models"][CV] == {"running": 1, "queued": 1, "refused": 0}
    assert refused.status_code == 503 and refused.headers["retry-after"] == "5"
    assert refused.json() == {"error": {"message": "The request queue is full; retry later.",
                                        "type": "ServiceUnavailableError", "param": None, "code": 503}}
    print(f"refused in {took * 1000:.1f} ms")
    assert after_ready["models"][CV]["refused"] == 1 and after_ready["refused"] >= 1
    assert sample(metrics, "tts_admission_refused_total", model=CV, reason="queue_full") == 1
    assert sample(metrics, "tts_admission_running", model=CV) == 1
    assert sample(metrics, "tts_admission_queued", model=CV) == 1
    assert ok.status_code == 200
    assert texts.count("Hello.") == 1  # the refused request never reached Triton; the last one did


def test_a_stream_finding_its_model_busy_is_refused_at_once_where_a_whole_file_request_waits(gateway):
    url, fake = gateway

    async def scenario():
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            calls = len(fake.calls)
            hung = asyncio.ensure_future(http.post(SPEECH, json={"input": "hang", "model": CV}, headers=auth()))
            await _wait_until(lambda: len(fake.calls) == calls + 1)
            streams = []
            for extra in ({"stream_format": "audio", "response_format": "pcm"}, {"stream": True, "response_format": "pcm"}):
                started = time.monotonic()
                r = await http.post(SPEECH, json={"input": "Hello.", "model": CV, **extra}, headers=auth("key-b"))
                streams.append((r, time.monotonic() - started))
            whole = asyncio.ensure_future(http.post(SPEECH, json={"input": "Hello.", "model": CV}, headers=auth("key-b")))
            await _wait_until(lambda: fake_queued(url) == 1)
            hung.cancel()
            await asyncio.gather(hung, return_exceptions=True)
            served = await asyncio.wait_for(whole, 10)  # its turn came when the first ended
            return streams, served, [c.fields["text"] for c in fake.calls[calls:]]

    def fake_queued(url: str) -> int:
        return int(httpx.get(url + "/ready", timeout=5).json()["admission"]["models"][CV]["queued"])

    streams, served, texts = run(scenario())
    for r, took in streams:
        assert r.status_code == 503 and r.headers["retry-after"] == "5", r.text
        assert "is busy and a stream is not queued" in r.json()["error"]["message"]
        print(f"stream refused in {took * 1000:.1f} ms")
    assert served.status_code == 200 and served.content[:4] == b"RIFF"
    assert texts == ["hang", "Hello."]  # neither refused stream reached Triton


def test_requests_without_a_model_are_decided_by_where_they_route_the_same_text_or_not(gateway):
    url, fake = gateway

    async def scenario():
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            calls = len(fake.calls)
            before = (await http.get("/ready")).json()["admission"]["models"][CV]["refused"]
            # Routed by their voice (a preset: CustomVoice); the second and third are routed as the first was.
            hung = [asyncio.ensure_future(http.post(SPEECH, json={"input": f"hang {k}", "voice": "vivian"},
                                                    headers=auth(k))) for k in ("key-a", "key-b")]
            await _wait_until(lambda: len(fake.calls) == calls + 1)
            deadline = time.monotonic() + 5
            while (await http.get("/ready")).json()["admission"]["models"][CV]["queued"] < 1:  # the second waits
                assert time.monotonic() < deadline, "the second request never queued"
                await asyncio.sleep(0.01)
            refused = await http.post(SPEECH, json={"input": "Something else.", "voice": "vivian"}, headers=auth("key-b"))
            after = (await http.get("/ready")).json()["admission"]["models"][CV]["refused"]
            for task in hung:
                task.cancel()
            await asyncio.gather(*hung, return_exceptions=True)
            await _wait_until(lambda: fake.calls[-1].cancelled)
            await asyncio.sleep(0.1)
            return refused, after - before

    refused, counted = run(scenario())
    assert refused.status_code == 503 and refused.json()["error"]["message"] == "The request queue is full; retry later."
    assert counted == 1  # on the model it routes to


def test_a_key_over_its_limit_gets_429_with_retry_after_while_another_key_is_served(gateway):
    url, fake = gateway

    async def scenario():
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            calls = len(fake.calls)
            # key-a holds two generations: one running, one queued behind it
            hung = [asyncio.ensure_future(http.post(SPEECH, json={"input": "hang", "model": CV}, headers=auth("key-a")))
                    for _ in range(2)]
            await _wait_until(lambda: len(fake.calls) == calls + 1)
            while (await http.get("/ready")).json()["admission"]["queued"] < 1:
                await asyncio.sleep(0.01)
            # its third is refused for the key, even for another model with room
            limited = await http.post(SPEECH, json={"input": "Hello.", "model": VD, "instructions": "calm", "task_type": "VoiceDesign"},
                                      headers=auth("key-a"))
            other = await http.post(SPEECH, json={"input": "Hello.", "model": VD, "instructions": "calm", "task_type": "VoiceDesign"},
                                    headers=auth("key-b"))
            for task in hung:
                task.cancel()
            await asyncio.gather(*hung, return_exceptions=True)
            return limited, other, [c.fields["text"] for c in fake.calls[calls:]]

    limited, other, texts = run(scenario())
    assert other.status_code == 200, other.text
    assert texts.count("Hello.") == 1  # key-b's
    assert limited.status_code == 429 and limited.headers["retry-after"] == "5"
    assert limited.json()["error"]["type"] == "RateLimitError" and limited.json()["error"]["code"] == 429
    assert other.status_code == 200


def test_a_websocket_sentence_that_cannot_be_admitted_gets_the_in_band_error_and_the_session_goes_on(gateway):
    from websockets.sync.client import connect

    url, fake = gateway

    async def hold(http):
        return await http.post(SPEECH, json={"input": "hang", "model": CV}, headers=auth("key-b"))

    async def scenario():
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            calls = len(fake.calls)
            hung = [asyncio.ensure_future(hold(http))]  # the model's one slot (a WebSocket sentence does not queue)
            await _wait_until(lambda: len(fake.calls) == calls + 1)
            ws_url = url.replace("http://", "ws://") + "/v1/audio/speech/stream?api_key=key-a"
            messages = await asyncio.to_thread(_ws_two_utterances, connect, ws_url, hung)
            await asyncio.gather(*hung, return_exceptions=True)
            return messages

    first, second = run(scenario())
    errors_ = [m for m in first if isinstance(m, dict) and m["type"] == "error"]
    assert len(errors_) == 1 and "is busy and a stream is not queued" in errors_[0]["message"], errors_
    done = next(m for m in first if isinstance(m, dict) and m["type"] == "audio.done")
    assert done["error"] is True and done["finish_reason"] == "error" and done["total_bytes"] == 0
    done = next(m for m in second if isinstance(m, dict) and m["type"] == "audio.done")
    assert done["error"] is False and done["total_bytes"] > 0


def _ws_two_utterances(connect, ws_url, hung):
    def utterance(ws):
        ws.send(json.dumps({"type": "input.text", "text": "Hello there."}))
        ws.send(json.dumps({"type": "input.done"}))
        out = []
        while True:
            m = ws.recv(timeout=30)
            m = json.loads(m) if isinstance(m, str) else m
            out.append(m)
            if isinstance(m, dict) and m["type"] == "session.done":
                return out

    with connect(ws_url) as ws:
        ws.send(json.dumps({"type": "session.config", "model": CV, "voice": "vivian", "max_new_tokens": 3}))
        first = utterance(ws)
        loop_tasks = hung
        for task in loop_tasks:  # free the slots (from this thread: the loop cancels them)
            task.get_loop().call_soon_threadsafe(task.cancel)
        time.sleep(0.3)
        second = utterance(ws)
    return first, second


def test_a_route_is_remembered_by_everything_but_the_text_for_a_moment_and_only_for_plain_fields():
    from gateway.app import RouteMemo

    now = [0.0]
    memo = RouteMemo(clock=lambda: now[0])
    one = {"input": "Hello.", "voice": "vivian", "stream_format": "audio", "max_new_tokens": 40}
    key = RouteMemo.key(one)
    memo.put(key, "cv")
    assert memo.get(RouteMemo.key({**one, "input": "Another sentence entirely."})) == "cv"
    assert memo.get(RouteMemo.key({**one, "voice": "my-upload"})) is None  # another voice: planned again
    assert RouteMemo.key({**one, "max_new_tokens": True}) != key  # (True == 1: the type is part of the key)
    assert RouteMemo.key({**one, "ref_audio": "A" * 10_000}) is None  # inline audio: never a key
    assert RouteMemo.key({**one, "extra_params": {"guidance": 2}}) is None
    now[0] = RouteMemo.ROUTE_S + 0.01
    assert memo.get(key) is None  # a stored voice uploaded or deleted since is seen within ROUTE_S
    for i in range(RouteMemo.SIZE + 10):
        memo.put(RouteMemo.key({**one, "seed": i}), "cv")
    assert memo.get(RouteMemo.key({**one, "seed": 0})) is None  # the oldest went first
    assert memo.get(RouteMemo.key({**one, "seed": RouteMemo.SIZE + 9})) == "cv"


# --- settings ------------------------------------------------------------------------------------------


def test_limits_come_from_the_config_then_the_environment(tmp_path):
    from gateway.settings import Settings, SettingsError

    fake_deployment(tmp_path)  # writes the manifests
    models = [{"name": "tiny-custom-voice", "variant": "custom_voice", "triton_model": "speech_generation",
               "artifacts_dir": str(tmp_path / "art-custom_voice")}]
    path = tmp_path / "gateway.json"
    path.write_text(json.dumps({"triton_url": "fake:0", "models": models, "max_queued_per_model": 3}))
    assert Settings.load(path, environ={}).max_queued_per_model == 3
    loaded = Settings.load(path, environ={"TTS_MAX_QUEUED_PER_MODEL": "7", "TTS_MAX_QUEUE_WAIT_S": "1.5"})
    assert (loaded.max_queued_per_model, loaded.max_queue_wait_s, loaded.max_running) == (7, 1.5, 64)
    assert Settings.load(path, environ={}).queue_streams is False
    assert Settings.load(path, environ={"TTS_QUEUE_STREAMS": "true"}).queue_streams is True
    with pytest.raises(SettingsError, match="TTS_QUEUE_STREAMS must be one of"):
        Settings.load(path, environ={"TTS_QUEUE_STREAMS": "maybe"})
    with pytest.raises(SettingsError, match="TTS_MAX_RUNNING must be a number"):
        Settings.load(path, environ={"TTS_MAX_RUNNING": "many"})
    with pytest.raises(SettingsError, match="max_concurrent_per_key must not be negative"):
        Settings.load(path, environ={"TTS_MAX_CONCURRENT_PER_KEY": "-1"})


def test_a_model_is_sent_no_more_than_it_steps_together_and_the_largest_batch_fits_its_bounds(tmp_path):
    from gateway.settings import Settings
    from triton_tts.serve import gateway_config
    from ttscore.backend.settings import SpeechGenerationSettings
    from ttscore.contract.tensors import MAX_ACTIVE_REQUESTS

    default = {name: field.default for name, field in Settings.model_fields.items()}
    assert default["max_running_per_model"] == MAX_ACTIVE_REQUESTS
    assert default["max_running_per_model"] + default["max_queued_per_model"] == default["batch_max_items"]
    assert default["max_queue_wait_s"] > 0  # on by default
    assert default["queue_streams"] is False  # a stream that cannot run is refused at once
    triton = SpeechGenerationSettings.from_model_config(  # speech_generation without the parameter
        {"model_transaction_policy": {"decoupled": True}, "parameters": {"artifacts_dir": {"string_value": str(tmp_path)}}},
        check_artifacts=False)
    assert triton.max_active_requests == MAX_ACTIVE_REQUESTS
    # `serve --max-active N`: Triton steps N together, the gateway sends it N.
    assert gateway_config([], "127.0.0.1:8001", {"max_running_per_model": 3})["max_running_per_model"] == 3
    assert "max_running_per_model" not in gateway_config([], "127.0.0.1:8001", {"vocoders": []})
