"""Gateway test helpers: a fake inference backend, fake deployments, and the real stack.

- `FakeBackend`: the InferenceBackend protocol with speech_generation's behaviour (validates the
  request tensors like the model does, streams `max_new_tokens` frames in chunks of
  `initial_chunk_frames` then 4, usage on every chunk, exactly one final) plus triggers chosen by
  the text: "fail-invalid" (INVALID_ARG before any audio), "fail-midstream" (INTERNAL after the
  first chunk), "fail-unavailable" (UNAVAILABLE), "fail-internal" (INTERNAL at once), "slow" (0.05 s
  per chunk, to observe cancellation), "hang" (no response ever), "hang-midstream" (the first chunk,
  then nothing), "keepalive-midstream" (after the first chunk, KEEPALIVES keep-alives 0.1 s apart, then the rest). It records every request and every cancellation. Incremental text: a request
  with the text-key parameter is open (one frame per word it has, then it waits for an extension;
  the final chunk after the one marked done); extensions are recorded in `extensions`. Health: `live`, per-model
  `probe_results` (default ok; a reload clears the model's), `components` (ensemble steps),
  `reload_error`, `hold_reloads` (a reload waits while it is true); reloads are recorded.
- `fake_deployment(tmp, variants)`: Settings over hand-written manifests (no exported weights).
- `start_stack(...)`: the real thing for end-to-end tests and manual runs: renders the model
  repository exactly as `triton-tts serve` does (triton_tts.serve.plan_deployment), starts Triton and
  the gateway (uvicorn) on free ports.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gateway.backend import INTERNAL, INVALID_ARG, UNAVAILABLE, BackendError, ProbeResult, SpeechChunk
from gateway.settings import Settings
from gateway.usage import Usage
from ttscore.contract import tensors as triton_io
from ttscore.contract.errors import InvalidRequest

SPEAKERS = ["aiden", "dylan", "eric", "ono_anna", "ryan", "serena", "sohee", "uncle_fu", "vivian"]
LANGUAGES = ["auto", "chinese", "english", "german", "italian", "portuguese", "spanish", "japanese", "korean",
             "french", "russian"]
SAMPLE_RATE = 24000
SAMPLES_PER_FRAME = 1920
X_VECTOR_DIM = 64


def fake_manifest(variant: str) -> dict[str, Any]:
    return {
        "format_version": 1,
        "variant": variant,
        "model_size": "tiny",
        "speakers": {s: 3000 + i for i, s in enumerate(SPEAKERS)} if variant == "custom_voice" else {},
        "speaker_dialects": {"eric": "sichuan_dialect", "dylan": "beijing_dialect"} if variant == "custom_voice" else {},
        "languages": LANGUAGES,
        "sample_rate": SAMPLE_RATE,
        "samples_per_frame": SAMPLES_PER_FRAME,
    }


NAMES = {"custom_voice": "tiny-custom-voice", "voice_design": "tiny-voice-design", "base": "tiny-base"}


def fake_deployment(root: Path, variants: tuple[str, ...] = ("custom_voice", "voice_design", "base"),
                    **settings: Any) -> Settings:
    """Settings over hand-written manifests; uploaded voices go to `root/speakers` unless given. The
    endpoint "fake:0" is not a host to resolve: the app's pool (gateway.pool) takes it as it is."""
    settings.setdefault("speaker_samples_dir", str(root / "speakers"))
    settings.setdefault("triton_resolve_interval_s", 0)
    models = []
    for variant in variants:
        art = root / f"art-{variant}"
        art.mkdir(parents=True, exist_ok=True)
        (art / "manifest.json").write_text(json.dumps(fake_manifest(variant)))
        models.append({
            "name": NAMES[variant],
            "variant": variant,
            "triton_model": "speech_generation" if len(variants) == 1 else f"speech_generation_{NAMES[variant]}",
            "voice_features_model": "voice_features" if variant == "base" else None,
            "artifacts_dir": str(art),
        })
    endpoint = {} if "triton_urls" in settings else {"triton_url": "fake:0"}
    return Settings.from_dict({**endpoint, "models": models, **settings})


def fake_app_client(root: Path, fake: Any, **settings: Any) -> Any:
    """A TestClient of the gateway over fake_deployment(root, **settings) with `fake` as its Triton backend
    (an exception in the app is the client's 500, not raised)."""
    from fastapi.testclient import TestClient

    from gateway.app import create_app

    return TestClient(create_app(fake_deployment(root, **settings), backend_factory=lambda s: fake),
                      raise_server_exceptions=False)


def fake_audio(frames: int, start: int = 0) -> np.ndarray:
    """Deterministic PCM: a 220 Hz tone whose phase continues across chunks."""
    n0, n1 = start * SAMPLES_PER_FRAME, (start + frames) * SAMPLES_PER_FRAME
    t = np.arange(n0, n1) / SAMPLE_RATE
    return (0.25 * np.sin(2 * np.pi * 220.0 * t)).astype(np.float32)


@dataclass
class Call:
    model: str
    fields: dict[str, Any]
    request_id: str
    chunks_sent: int = 0
    cancelled: bool = False
    finished: bool = False
    text_key: str | None = None  # incremental text: open until an extension says done
    text_done: bool = False
    more: asyncio.Event = field(default_factory=asyncio.Event)


KEEPALIVES = 6  # "keepalive-midstream": 0.6 s of keep-alives between two chunks


@dataclass
class FakeBackend:
    ready: bool = True
    not_ready_models: set[str] = field(default_factory=set)
    chunk_frames: int = 4
    calls: list[Call] = field(default_factory=list)
    feature_calls: list[tuple[str, int, int, str]] = field(default_factory=list)
    closed: bool = False
    max_concurrent: int = 0
    live: bool = True
    probe_results: dict[str, ProbeResult] = field(default_factory=dict)
    components: dict[str, list[str]] = field(default_factory=dict)
    reload_error: str | None = None
    hold_reloads: bool = False
    reloads: list[str] = field(default_factory=list)
    extensions: list[tuple[str, str, bool]] = field(default_factory=list)  # (key, text, done)
    aligner_calls: list[tuple[str, np.ndarray, int, str]] = field(default_factory=list)  # (text, audio, rate, id)
    aligner_error: str | None = None  # forced_aligner answers this error code
    _active: int = 0

    async def close(self) -> None:
        self.closed = True

    async def server_live(self) -> bool:
        return self.live

    async def model_components(self, model: str) -> list[str]:
        return list(self.components.get(model, [model]))

    async def probe_model(self, model: str, timeout_s: float) -> ProbeResult:
        if not self.live:
            return ProbeResult("unreachable", "connection refused")
        return self.probe_results.get(model, ProbeResult("ok"))

    async def reload_model(self, model: str, timeout_s: float) -> None:
        self.reloads.append(model)
        while self.hold_reloads:  # set from the test's thread
            await asyncio.sleep(0.01)
        if self.reload_error is not None:
            raise BackendError(INTERNAL, self.reload_error)
        self.probe_results.pop(model, None)

    async def server_ready(self) -> bool:
        return self.ready

    async def model_ready(self, model: str) -> bool:
        return self.ready and model not in self.not_ready_models

    async def _open_stream(self, call: Call) -> AsyncIterator[SpeechChunk]:
        """One frame per word of the text so far; waits for more; final after the text is done."""
        made = 0
        try:
            while True:
                words = len(call.fields["text"].split())
                if made < words:
                    n = words - made
                    chunk = SpeechChunk(audio=fake_audio(n, made), frames=n, usage=Usage(words, 0, made + n),
                                        final=False, finish_reason="")
                    made += n
                    call.chunks_sent += 1
                    yield chunk
                    continue
                if call.text_done:
                    call.finished = True
                    yield SpeechChunk(audio=np.zeros(0, np.float32), frames=0, usage=Usage(words, 0, made),
                                      final=True, finish_reason="stop")
                    return
                call.more.clear()
                await call.more.wait()
        except (GeneratorExit, asyncio.CancelledError):
            call.cancelled = True
            raise

    async def infer(self, model: str, inputs: dict[str, np.ndarray], request_id: str) -> dict[str, np.ndarray]:
        """The voice_features ensemble: (audio, sample_rate) -> x_vector, ref_codes; forced_aligner: fake_words."""
        audio, sample_rate = inputs["audio"], int(inputs["sample_rate"].reshape(-1)[0])
        if model == ALIGNER_MODEL:
            text = inputs["text"].reshape(-1)[0].decode("utf-8")
            self.aligner_calls.append((text, audio.copy(), sample_rate, request_id))
            if self.aligner_error is not None:
                raise BackendError(self.aligner_error, "the aligner failed")
            return fake_words(text, audio.size / sample_rate)
        self.feature_calls.append((model, int(audio.size), sample_rate, request_id))
        if not self.ready:
            raise BackendError(UNAVAILABLE, "the inference server is unreachable")
        seconds = audio.size / sample_rate
        if not 0.1 <= seconds <= 60:
            raise BackendError(INVALID_ARG, "reference audio must be 0.1-60 s", "audio")
        frames = int(np.ceil(seconds * 12.5))
        return {"x_vector": np.full(X_VECTOR_DIM, 0.5, np.float32), "ref_codes": np.zeros((frames, 16), np.int64)}

    async def stream_speech(self, model: str, inputs: dict[str, np.ndarray], request_id: str,
                            parameters: dict[str, Any] | None = None) -> AsyncIterator[SpeechChunk]:
        params = dict(parameters or {})
        if triton_io.TEXT_EXTEND_PARAMETER in params:  # more text for an open request
            key, done = params[triton_io.TEXT_EXTEND_PARAMETER], params.get(triton_io.TEXT_DONE_PARAMETER) is True
            text = inputs["text"].reshape(-1)[0].decode("utf-8")
            self.extensions.append((key, text, done))
            call = next((c for c in self.calls if c.text_key == key), None)
            for _ in range(500):  # as Triton's scheduler, an extension that overtook its request waits for it
                if call is not None:
                    break
                await asyncio.sleep(0.01)
                call = next((c for c in self.calls if c.text_key == key), None)
            if call is None or call.text_done or call.finished or call.cancelled:
                raise BackendError(INVALID_ARG, "no open request takes this text", "text")
            call.fields["text"] += text
            call.text_done = done
            call.more.set()
            return
        if triton_io.TEXT_KEY_PARAMETER in params:
            fields = triton_io.request_kwargs(inputs)
            call = Call(model, fields, request_id, text_key=params[triton_io.TEXT_KEY_PARAMETER])
            self.calls.append(call)
            async for chunk in self._open_stream(call):
                yield chunk
            return
        try:
            fields = triton_io.request_kwargs(inputs)
        except InvalidRequest as exc:
            raise BackendError(INVALID_ARG, exc.message, exc.param) from None
        call = Call(model, fields, request_id)
        self.calls.append(call)
        if not self.ready or model in self.not_ready_models:
            raise BackendError(UNAVAILABLE, f"Request for unknown model: '{model}' is not found")
        text = fields["text"]
        if text == "fail-invalid":
            raise BackendError(INVALID_ARG, "text is not speakable", "text")
        if text == "fail-unavailable":
            raise BackendError(UNAVAILABLE, "too many requests in the queue; retry later")
        if text == "fail-internal":
            raise BackendError(INTERNAL, "internal error")
        if text == "hang":
            try:
                await asyncio.Event().wait()  # a request Triton never answers
            except asyncio.CancelledError:
                call.cancelled = True
                raise
        total = int(fields.get("max_new_tokens") or 3)
        first = int(fields.get("initial_chunk_frames") or 1)
        audio_tokens = int(fields["ref_codes"].shape[0]) if fields.get("ref_codes") is not None else 0
        text_tokens = len(text.split()) + len((fields.get("instructions") or "").split())
        self._active += 1
        self.max_concurrent = max(self.max_concurrent, self._active)
        try:
            done = 0
            while done < total:
                n = min(first if done == 0 else self.chunk_frames, total - done)
                if text in ("slow", "slow."):  # (a sentence of its own: "slow.")
                    await asyncio.sleep(0.05)
                else:
                    await asyncio.sleep(0)
                if text in ("fail-midstream", "fail-midstream.") and done > 0:  # (a sentence of its own too)
                    raise BackendError(INTERNAL, "internal error")
                if text == "hang-midstream" and done > 0:
                    await asyncio.Event().wait()
                if text == "keepalive-midstream" and done == 1:  # a long step: keep-alives only, 0.1 s apart
                    for _ in range(KEEPALIVES):
                        await asyncio.sleep(0.1)
                        yield SpeechChunk(audio=np.zeros(0, np.float32), frames=0, usage=Usage(), final=False)
                final = done + n >= total
                chunk = SpeechChunk(
                    audio=fake_audio(n, done), frames=n, usage=Usage(text_tokens, audio_tokens, done + n),
                    # the fake model stops by itself at its budget, unless the text asks for a runaway (cut there)
                    final=final, finish_reason=("length" if "runaway" in text else "stop") if final else "",
                )
                done += n
                call.chunks_sent += 1
                yield chunk
            call.finished = True
        except GeneratorExit:
            call.cancelled = True  # the consumer closed the stream: Triton would cancel the request
            raise
        except asyncio.CancelledError:
            call.cancelled = True
            raise
        finally:
            self._active -= 1


ALIGNER_MODEL = "forced_aligner"


def fake_words(text: str, seconds: float) -> dict[str, np.ndarray]:
    """FakeBackend's forced_aligner: the text's whitespace-separated words, evenly over `seconds`, the last one
    ending half a second past the clip (the real aligner does not clamp either)."""
    spans = [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]
    n = len(spans)
    starts = [i * seconds / n for i in range(n)]
    ends = [(i + 1) * seconds / n for i in range(n)]
    if ends:
        ends[-1] = seconds + 0.5
    return {"word_text": np.array([text[a:b].encode() for a, b in spans], dtype=np.object_),
            "word_start": np.array(starts, np.float32), "word_end": np.array(ends, np.float32),
            "char_start": np.array([a for a, _ in spans], np.int32), "char_end": np.array([b for _, b in spans], np.int32)}


def fake_pcm(fields: dict[str, Any]) -> np.ndarray:
    """The audio FakeBackend produces for a request."""
    return fake_audio(int(fields.get("max_new_tokens") or 3))


# --- the real stack --------------------------------------------------------------------------------


@dataclass
class Stack:
    triton: Any  # ttscore.backend.triton_server.TritonServer
    gateway_url: str
    settings: Settings
    config_path: Path
    _server: Any = None
    _thread: threading.Thread | None = None

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(15)
        if self.triton is not None:
            self.triton.stop()


def render_stack_repository(work: Path, checkpoints: list[tuple[Path, Path]], max_active: int | None = None,
                            aligner: Path | None = None) -> tuple[Path, dict[str, Any]]:
    """Render the repository and gateway config as `triton-tts serve` does; (checkpoint, artifacts) pairs;
    `aligner`: a forced aligner's export (`serve --aligner`), named in the config's `aligner_model`."""
    from triton_tts.serve import Served, _model_id, gateway_config, plan_deployment
    from ttscore.backend import repository
    from ttscore.contract.manifest import read_manifest

    taken: set[str] = set()
    served = [Served(_model_id(ck.resolve(), taken), ck, art, read_manifest(art)) for ck, art in checkpoints]
    plan = plan_deployment(served, max_active, aligner=aligner)
    repo = repository.render_repository(
        work / "model_repository", plan["settings"], models=plan["models"], aliases=plan["aliases"]
    )
    config = gateway_config(served, "127.0.0.1:0")
    if plan["aligner_model"] is not None:
        config["aligner_model"] = plan["aligner_model"]
    return repo, config


def start_gateway(settings: Settings, port: int, host: str = "127.0.0.1", timeout_s: float = 60.0
                  ) -> tuple[Any, threading.Thread]:
    """uvicorn serving create_app(settings) in a background thread; returns once /health answers."""
    import urllib.request

    import uvicorn

    from gateway.app import create_app

    config = uvicorn.Config(create_app(settings), host=host, port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="gateway-uvicorn", daemon=True)
    thread.start()
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://{host}:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return server, thread
        except OSError:
            time.sleep(0.1)
        if not thread.is_alive():
            raise RuntimeError("the gateway thread died during startup")
    server.should_exit = True
    raise RuntimeError("the gateway did not answer /health in time")
