"""Bounded soak and fault test of a running gateway (what users feel while things break).

    .venv/bin/python perf/soak.py --duration 120 --concurrency 4 \\
        [--url http://127.0.0.1:8091] [--kill-stub-at 30] [--kill-server-at 80 --triton-http-port 8000]
    .venv/bin/python perf/soak.py --duration 1800 --concurrency 6 --models all --kill-every 240 \\
        --overload-at 900 --overload-for 120 --overload-concurrency 48 --triton-http-port 8000

For `--duration` seconds, `--concurrency` workers send a seeded mix of requests to the gateway:
non-streaming speech, raw audio streams, SSE streams, WebSocket sessions (/v1/audio/speech/stream),
voice uploads (POST /v1/audio/voices with a generated WAV) and raw streams the client abandons after
the first audio (a disconnect mid-stream). Optionally, at given times, it SIGKILLs the
speech_generation python-backend stub(s) once and the whole tritonserver once (or, with --kill-every,
the stubs and the server in turn every so many seconds), and measures how long the service takes to
recover (from the kill until /ready is 200 again AND a request succeeds). With --models all, each
request goes to one of the served models (GET /v1/models, aliases left out): a preset voice where the
model lists voices, else the generated WAV as inline reference audio (with its transcript). An
overload phase (--overload-at/--overload-for/--overload-concurrency) adds that many workers sending
raw streams for its duration: above the admission limits, the refusals must be clear (503 +
Retry-After) and nothing may hang.

Every request ends in exactly one of:
- ok: audio arrived and the response completed (a planned disconnect: first audio arrived);
- error, clear: the server said what went wrong (an HTTP error status with its JSON message, an SSE
  `speech.audio.error`, a WebSocket `error` message);
- error, transport: the connection failed or the body ended early with no message (for a raw audio
  stream after its first byte this is the only way to fail, so it is reported, not hidden);
- hung: no end within `--request-timeout` (must be 0).
At the end, every voice uploaded successfully must still be listed (voices lost must be 0), then the
uploaded voices are deleted (unless --keep-voices). A table goes to stdout, the full record (every
request with kind, start, TTFA, end, outcome, status, message) to perf/results/soak-*.json. Exit
status 1 when something hung, a voice was lost, or the voices could not be checked.

Bounded: requests stop at --duration (and --max-requests); each one is abandoned at its deadline;
recovery is awaited at most --recovery-timeout. Loopback URLs only. Kills are only ever sent to the
tritonserver identified by --triton-pid / --triton-http-port (or the only one running) and to stubs
that are its children: never to processes found by a broad name match.

Importable for tests: `run_soak(SoakConfig(...)) -> SoakReport`. This module imports nothing of the
project (it is a client), only httpx, websockets and the standard library.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import contextvars
import io
import ipaddress
import itertools
import json
import logging
import math
import os
import random
import signal
import sys
import time
import wave
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

log = logging.getLogger("perf.soak")

KINDS = ("speech", "stream", "sse", "websocket", "upload", "disconnect")
STREAMING_KINDS = ("stream", "sse", "websocket", "disconnect")  # where time to first audio means something
DEFAULT_MIX = {"speech": 3.0, "stream": 3.0, "sse": 2.0, "websocket": 2.0, "upload": 1.0, "disconnect": 1.0}
TEXTS = (
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Streaming speech synthesis lets applications start playing audio early.",
    "Please remember to bring your umbrella, it might rain this afternoon.",
    "Every morning the baker opens the shop at exactly six o'clock.",
)
RESULTS_DIR = Path(__file__).resolve().parent / "results"
STUB_NAME = "triton_python_backend_stub"
SERVER_NAME = "tritonserver"

OK, ERROR, HUNG = "ok", "error", "hung"


# --- configuration and records ------------------------------------------------------------------


@dataclass
class SoakConfig:
    url: str = "http://127.0.0.1:8091"
    duration_s: float = 60.0
    concurrency: int = 4
    mix: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_MIX))
    voice: str = "vivian"
    language: str = "English"
    max_new_tokens: int = 16  # frames per request (80 ms each): short, so many requests fit
    request_timeout_s: float = 60.0  # a request with no end by then is hung
    error_backoff_s: float = 0.5  # a worker pauses after a failed request (a dead gateway fails in
    #                               microseconds: without a pause the run would be thousands of refusals)
    max_requests: int = 5000
    seed: int = 0
    kill_stub_at_s: float | None = None
    kill_stub_model: str = "speech_generation"  # substring of the stub's model.py path
    kill_server_at_s: float | None = None
    triton_pid: int | None = None
    triton_http_port: int | None = None
    recovery_timeout_s: float = 120.0
    recovery_poll_s: float = 0.5
    keep_voices: bool = False
    models: list[str] | None = None  # None: the default model; ["all"]: every served model (GET /v1/models)
    # A model's own max_new_tokens (0: left out; a family may refuse fewer frames than its text needs).
    model_max_new_tokens: dict[str, int] = field(default_factory=dict)
    kill_every_s: float | None = None  # the stubs, then the server, then the stubs... every so many seconds
    overload_at_s: float | None = None
    overload_for_s: float = 60.0
    overload_concurrency: int = 0

    def validate(self) -> None:
        check_loopback(self.url)
        unknown = set(self.mix) - set(KINDS)
        if unknown or not any(w > 0 for w in self.mix.values()):
            raise ValueError(f"mix must weigh some of {KINDS} (unknown: {sorted(unknown)})")
        if self.duration_s <= 0 or self.concurrency < 1 or self.request_timeout_s <= 0 or self.max_requests < 1:
            raise ValueError("duration, concurrency, request timeout and max requests must be positive")


def check_loopback(url: str) -> None:
    """Only loopback targets: this tool floods and kills things."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"{url}: only http(s) URLs")
    if host == "localhost":
        return
    try:
        if ipaddress.ip_address(host).is_loopback:
            return
    except ValueError:
        pass
    raise ValueError(f"{url}: only loopback addresses (127.0.0.1, ::1, localhost) are allowed")


@dataclass
class RequestRecord:
    kind: str
    start: float  # seconds since the soak started
    model: str = ""  # the model it named ("": the gateway's default)
    ttfa: float | None = None  # seconds from start to the first audio bytes
    end: float | None = None  # None when hung
    outcome: str = ERROR
    status: int | None = None
    message: str | None = None
    clear: bool = False  # an error that the server explained (status + message)
    audio_bytes: int = 0
    note: str = ""

    def overlaps(self, window: tuple[float, float]) -> bool:
        end = self.end if self.end is not None else math.inf
        return self.start <= window[1] and end >= window[0]


@dataclass
class FaultRecord:
    kind: str  # "kill_stub" | "kill_server"
    planned_at: float
    at: float | None = None  # when the SIGKILL was sent (None: not sent)
    target: str = ""
    pids: list[int] = field(default_factory=list)
    recovered_after_s: float | None = None
    probes: int = 0
    note: str = ""  # why not sent / not recovered, last probe error
    window_end: float | None = None  # end of the fault window: recovery (never recovered: open-ended)

    @property
    def window(self) -> tuple[float, float] | None:
        if self.at is None:
            return None
        return (self.at, self.window_end if self.window_end is not None else math.inf)


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default), None for no values."""
    xs = sorted(values)
    if not xs:
        return None
    k = (len(xs) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


@dataclass
class SoakReport:
    config: dict[str, Any]
    started_at: str
    wall_s: float = 0.0
    requests: list[RequestRecord] = field(default_factory=list)
    faults: list[FaultRecord] = field(default_factory=list)
    voices_uploaded: list[str] = field(default_factory=list)
    voices_lost: list[str] = field(default_factory=list)
    voices_check_error: str | None = None  # the final listing failed: voices not checked

    def count(self, outcome: str, clear: bool | None = None, kind: str | None = None) -> int:
        return sum(
            1
            for r in self.requests
            if r.outcome == outcome and (clear is None or r.clear == clear) and (kind is None or r.kind == kind)
        )

    @property
    def hung(self) -> int:
        return self.count(HUNG)

    @property
    def passed(self) -> bool:
        return self.hung == 0 and not self.voices_lost and self.voices_check_error is None

    def _outside_faults(self) -> list[RequestRecord]:
        windows = [w for w in (f.window for f in self.faults) if w is not None]
        return [r for r in self.requests if not any(r.overlaps(w) for w in windows)]

    def summary(self) -> dict[str, Any]:
        calm = self._outside_faults()
        ttfa = [r.ttfa for r in calm if r.outcome == OK and r.kind in STREAMING_KINDS and r.ttfa is not None]
        latency = [r.end - r.start for r in calm if r.outcome == OK and r.kind == "speech" and r.end is not None]
        return {
            "sent": len(self.requests),
            "succeeded": self.count(OK),
            "failed_clear": self.count(ERROR, clear=True),
            "failed_transport": self.count(ERROR, clear=False),
            "hung": self.hung,
            "voices_uploaded": len(self.voices_uploaded),
            "voices_lost": None if self.voices_check_error else len(self.voices_lost),
            "by_kind": {
                k: {
                    "sent": sum(1 for r in self.requests if r.kind == k),
                    "ok": self.count(OK, kind=k),
                    "error_clear": self.count(ERROR, clear=True, kind=k),
                    "error_transport": self.count(ERROR, clear=False, kind=k),
                    "hung": self.count(HUNG, kind=k),
                }
                for k in KINDS
                if any(r.kind == k for r in self.requests)
            },
            "by_model": {
                m: {
                    "sent": sum(1 for r in self.requests if r.model == m),
                    "ok": sum(1 for r in self.requests if r.model == m and r.outcome == OK),
                    "error_clear": sum(1 for r in self.requests if r.model == m and r.outcome == ERROR and r.clear),
                    "error_transport": sum(1 for r in self.requests
                                           if r.model == m and r.outcome == ERROR and not r.clear),
                    "hung": sum(1 for r in self.requests if r.model == m and r.outcome == HUNG),
                }
                for m in sorted({r.model for r in self.requests})
            },
            "overload": {
                "requests": sum(1 for r in self.requests if "overload" in r.note),
                "refused_503": sum(1 for r in self.requests if "overload" in r.note and r.status == 503),
                "ok": sum(1 for r in self.requests if "overload" in r.note and r.outcome == OK),
            },
            "outside_fault_windows": {
                "requests": len(calm),
                "ttfa_streaming_n": len(ttfa),
                "ttfa_p50_s": _round(percentile(ttfa, 50)),
                "ttfa_p99_s": _round(percentile(ttfa, 99)),
                "speech_latency_p50_s": _round(percentile(latency, 50)),
                "speech_latency_p99_s": _round(percentile(latency, 99)),
            },
            "faults": [
                {"kind": f.kind, "at_s": _round(f.at), "target": f.target, "pids": f.pids,
                 "recovered_after_s": _round(f.recovered_after_s), "note": f.note}
                for f in self.faults
            ],
            "passed": self.passed,
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "started_at": self.started_at,
            "wall_s": round(self.wall_s, 2),
            "summary": self.summary(),
            "voices_uploaded": self.voices_uploaded,
            "voices_lost": self.voices_lost,
            "voices_check_error": self.voices_check_error,
            "faults": [asdict(f) for f in self.faults],
            "requests": [asdict(r) for r in self.requests],
        }

    def table(self) -> str:
        s = self.summary()
        calm = s["outside_fault_windows"]
        rows: list[tuple[str, str]] = [
            ("requests sent", str(s["sent"])),
            ("succeeded", str(s["succeeded"])),
            ("failed with a clear error", str(s["failed_clear"])),
            ("failed without a message (transport)", str(s["failed_transport"])),
            ("hung (must be 0)", str(s["hung"])),
            ("voices uploaded", str(s["voices_uploaded"])),
            ("voices lost (must be 0)",
             str(s["voices_lost"]) if self.voices_check_error is None else f"not checked: {self.voices_check_error}"),
        ]
        for f in self.faults:
            if f.at is None:
                value = f"not done: {f.note}"
            elif f.recovered_after_s is not None:
                value = f"{f.recovered_after_s:.1f} s ({f.target})"
            else:
                value = f"NOT RECOVERED: {f.note} ({f.target})"
            rows.append((f"recovery after {f.kind} at {f.planned_at:g} s", value))
        rows += [
            (f"TTFA p50 / p99, streaming, outside faults (n={calm['ttfa_streaming_n']})",
             f"{_fmt_s(calm['ttfa_p50_s'])} / {_fmt_s(calm['ttfa_p99_s'])}"),
            ("non-streaming latency p50 / p99, outside faults",
             f"{_fmt_s(calm['speech_latency_p50_s'])} / {_fmt_s(calm['speech_latency_p99_s'])}"),
            ("result", "PASS" if self.passed else "FAIL"),
        ]
        width = max(len(k) for k, _ in rows)
        lines = [f"{k.ljust(width)}  {v}" for k, v in rows]
        lines.append("")
        lines.append(f"{'kind'.ljust(11)} {'sent':>5} {'ok':>5} {'clear':>6} {'transp':>6} {'hung':>5}")
        for kind, c in s["by_kind"].items():
            lines.append(
                f"{kind.ljust(11)} {c['sent']:>5} {c['ok']:>5} {c['error_clear']:>6} {c['error_transport']:>6} {c['hung']:>5}"
            )
        return "\n".join(lines)


def _round(x: float | None, digits: int = 3) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, digits)


def _fmt_s(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f} s"


# --- processes (Linux /proc) ------------------------------------------------------------------------


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    argv: tuple[str, ...]

    @property
    def name(self) -> str:
        return os.path.basename(self.argv[0]) if self.argv else ""


def list_processes(proc_root: Path = Path("/proc")) -> list[Proc]:
    procs = []
    for entry in proc_root.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:  # exited meanwhile, or not ours to read
            continue
        # The comm field may contain spaces and parentheses: the ppid follows the LAST ')'.
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        procs.append(Proc(int(entry.name), ppid, tuple(a.decode(errors="replace") for a in argv if a)))
    return procs


def find_tritonserver(procs: Sequence[Proc], pid: int | None = None, http_port: int | None = None) -> Proc:
    """The tritonserver to kill: by pid, by its --http-port, or the only one running. Several
    servers (other people's) and no way to tell them apart is an error, never a guess."""
    servers = [p for p in procs if p.name == SERVER_NAME]
    if pid is not None:
        servers = [p for p in servers if p.pid == pid]
        if not servers:
            raise LookupError(f"pid {pid} is not a running {SERVER_NAME}")
    if http_port is not None:
        servers = [p for p in servers if f"--http-port={http_port}" in p.argv]
    if len(servers) != 1:
        raise LookupError(
            f"{len(servers)} {SERVER_NAME} processes match; identify it with --triton-pid or --triton-http-port"
        )
    return servers[0]


def find_stubs(procs: Sequence[Proc], server_pid: int, model: str) -> list[Proc]:
    """python-backend stubs of `server_pid` whose model.py path names `model` (argv[1] is
    `<repository>/<model>/1/model.py`); a multi-checkpoint deployment has one per checkpoint."""
    return [
        p for p in procs
        if p.ppid == server_pid and p.name == STUB_NAME and len(p.argv) > 1 and model in stub_model(p)
    ]


def stub_model(proc: Proc) -> str:
    """The model directory name of a stub (`<repository>/<model>/1/model.py` is its argv[1])."""
    return Path(proc.argv[1]).parent.parent.name if len(proc.argv) > 1 else ""


# --- audio -----------------------------------------------------------------------------------------


def make_wav(seconds: float = 1.5, sample_rate: int = 24000, freq: float = 180.0) -> bytes:
    """A 16-bit mono tone with a slow tremolo (voice features need a non-trivial signal)."""
    n = int(seconds * sample_rate)
    frames = bytearray()
    for i in range(n):
        t = i / sample_rate
        x = 0.3 * math.sin(2 * math.pi * freq * t) * (0.6 + 0.4 * math.sin(2 * math.pi * 3 * t))
        frames += int(x * 32767).to_bytes(2, "little", signed=True)
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(bytes(frames))
    return buf.getvalue()


# --- one request of each kind ------------------------------------------------------------------------


def _error_message(body: bytes) -> str | None:
    try:
        err = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return None
    if isinstance(err, dict) and err.get("message"):
        return str(err["message"])
    return None


class _Clock:
    def __init__(self, t0: float) -> None:
        self.t0 = t0

    def now(self) -> float:
        return time.monotonic() - self.t0


class Runner:
    """Sends requests of every kind and turns each into a RequestRecord (never raises)."""

    def __init__(self, cfg: SoakConfig, client: httpx.AsyncClient, clock: _Clock, run_id: str) -> None:
        self.cfg = cfg
        self.client = client
        self.clock = clock
        self.run_id = run_id
        self.uploaded: list[str] = []
        self._names = itertools.count(1)
        self._wav = make_wav()
        # model -> the fields that give it a voice (None: the default model with --voice/--language)
        self.voices: dict[str | None, dict[str, Any]] = {None: {"voice": cfg.voice, "language": cfg.language}}
        self._model: contextvars.ContextVar[str | None] = contextvars.ContextVar("soak_model", default=None)

    async def discover(self) -> list[str | None]:
        """The models requests go to: the default, or each served one (not aliases) with its voice fields."""
        if not self.cfg.models:
            return [None]
        resp = await self.client.get("/v1/models", timeout=30)
        resp.raise_for_status()
        served = [m for m in resp.json()["data"] if not m.get("alias_of")]
        wanted = {m["id"] for m in served} if self.cfg.models == ["all"] else set(self.cfg.models)
        clip = "data:audio/wav;base64," + base64.b64encode(self._wav).decode()
        for m in served:
            if m["id"] not in wanted:
                continue
            if m.get("voices"):
                fields: dict[str, Any] = {"voice": m["voices"][0]}
                if self.cfg.language in (m.get("languages") or []):
                    fields["language"] = self.cfg.language
            else:  # a cloning model: the generated clip as its reference, with a transcript
                fields = {"ref_audio": clip, "ref_text": TEXTS[0]}
            self.voices[m["id"]] = fields
        missing = wanted - set(self.voices)
        if missing:
            raise ValueError(f"not served: {', '.join(sorted(missing))}")
        return [m for m in self.voices if m is not None]

    def speech_body(self, text: str, **extra: Any) -> dict[str, Any]:
        model = self._model.get()
        named = {"model": model} if model is not None else {}
        frames = self.cfg.model_max_new_tokens.get(model or "", self.cfg.max_new_tokens)
        limit = {"max_new_tokens": frames} if frames else {}
        return {"input": text, **named, **self.voices[model], **limit, **extra}

    async def run(self, kind: str, text: str, model: str | None = None) -> RequestRecord:
        rec = RequestRecord(kind=kind, start=self.clock.now(), model=model or "")
        handler: Callable[[RequestRecord, str], Awaitable[None]] = getattr(self, f"_{kind}")
        # asyncio.wait, not wait_for: only OUR deadline means hung; a TimeoutError raised inside
        # (e.g. a WebSocket opening handshake timing out) is a transport error like any other.
        self._model.set(model)  # (this task's context: the handler's task copies it)
        task = asyncio.ensure_future(handler(rec, text))
        done, _ = await asyncio.wait({task}, timeout=self.cfg.request_timeout_s)
        if not done:
            task.cancel()  # closes the connection: the server sees the client go away
            with contextlib.suppress(BaseException):
                await task
            rec.outcome, rec.end, rec.clear = HUNG, None, False
            rec.message = f"no end within {self.cfg.request_timeout_s:g} s"
            return rec
        exc = task.exception()
        if exc is not None:  # connection refused/reset, body ended early, websockets errors, ...
            rec.outcome, rec.clear = ERROR, False
            rec.message = f"{type(exc).__name__}: {exc}"[:300]
            if not isinstance(exc, (httpx.HTTPError, OSError, TimeoutError, ValueError)) and not _is_websocket_error(exc):
                log.warning("%s request failed unexpectedly", kind, exc_info=exc)
        rec.end = self.clock.now()
        return rec

    def _http_error(self, rec: RequestRecord, status: int, body: bytes) -> None:
        rec.status = status
        rec.message = _error_message(body)
        rec.clear = rec.message is not None
        if rec.message is None:
            rec.message = body[:200].decode(errors="replace") or f"HTTP {status} with an empty body"
        rec.outcome = ERROR

    async def _speech(self, rec: RequestRecord, text: str) -> None:
        resp = await self.client.post("/v1/audio/speech", json=self.speech_body(text, response_format="wav"))
        rec.status = resp.status_code
        if resp.status_code != 200:
            self._http_error(rec, resp.status_code, resp.content)
            return
        rec.ttfa = self.clock.now() - rec.start  # the whole clip is the first audio
        rec.audio_bytes = len(resp.content)
        if resp.content[:4] == b"RIFF" and len(resp.content) > 44:
            rec.outcome = OK
        else:
            rec.outcome, rec.clear, rec.message = ERROR, False, f"200 without a WAV body ({len(resp.content)} bytes)"

    async def _stream(self, rec: RequestRecord, text: str, disconnect: bool = False) -> None:
        body = self.speech_body(text, response_format="pcm", stream_format="audio")
        async with self.client.stream("POST", "/v1/audio/speech", json=body) as resp:
            rec.status = resp.status_code
            if resp.status_code != 200:
                self._http_error(rec, resp.status_code, await resp.aread())
                return
            async for chunk in resp.aiter_bytes():
                if not chunk:
                    continue
                if rec.ttfa is None:
                    rec.ttfa = self.clock.now() - rec.start
                rec.audio_bytes += len(chunk)
                if disconnect:
                    # Leaving the context with the body unread closes the connection: the gateway
                    # must cancel the Triton request and free its slot.
                    rec.outcome, rec.note = OK, "disconnected after the first audio"
                    return
        if rec.audio_bytes:
            rec.outcome = OK
            if disconnect:
                rec.note = "finished before the planned disconnect"
        else:
            rec.outcome, rec.clear, rec.message = ERROR, False, "200 with an empty audio stream"

    async def _disconnect(self, rec: RequestRecord, text: str) -> None:
        # Longer than the others, so there is a stream left to abandon after its first chunk.
        await self._stream(rec, text + " " + text, disconnect=True)

    async def _sse(self, rec: RequestRecord, text: str) -> None:
        body = self.speech_body(text, response_format="pcm", stream=True)
        async with self.client.stream("POST", "/v1/audio/speech", json=body) as resp:
            rec.status = resp.status_code
            if resp.status_code != 200:
                self._http_error(rec, resp.status_code, await resp.aread())
                return
            event, data = "message", []
            async for line in resp.aiter_lines():
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].strip())
                elif line == "" and data:
                    payload = json.loads("\n".join(data))
                    if event == "speech.audio.delta":
                        if rec.ttfa is None:
                            rec.ttfa = self.clock.now() - rec.start
                        rec.audio_bytes += len(payload.get("audio", "")) * 3 // 4
                    elif event == "speech.audio.done":
                        rec.outcome = OK
                        return
                    elif event == "speech.audio.error":
                        err = payload.get("error") or {}
                        rec.outcome, rec.clear = ERROR, bool(err.get("message"))
                        rec.message = str(err.get("message") or payload)
                        code = err.get("code")
                        rec.status = code if isinstance(code, int) else rec.status
                        return
                    event, data = "message", []
        rec.outcome, rec.clear, rec.message = ERROR, False, "SSE stream ended without speech.audio.done or .error"

    async def _websocket(self, rec: RequestRecord, text: str) -> None:
        from websockets.asyncio.client import connect  # only this kind needs it
        from websockets.exceptions import ConnectionClosed, InvalidStatus

        url = self.cfg.url.replace("http", "ws", 1).rstrip("/") + "/v1/audio/speech/stream"
        errors: list[str] = []
        failed = False
        try:
            async with connect(url, open_timeout=10, close_timeout=5, max_size=None) as ws:
                body = self.speech_body(text)
                config = {"type": "session.config", "stream_audio": True,
                          **{k: v for k, v in body.items() if k != "input"}}
                for message in (config, {"type": "input.text", "text": text}, {"type": "input.done"}):
                    await ws.send(json.dumps(message))
                while True:
                    raw = await ws.recv()
                    if isinstance(raw, bytes):
                        if rec.ttfa is None:
                            rec.ttfa = self.clock.now() - rec.start
                        rec.audio_bytes += len(raw)
                        continue
                    msg = json.loads(raw)
                    if msg.get("type") == "error":
                        errors.append(str(msg.get("message")))
                    elif msg.get("type") == "audio.done":
                        failed = failed or bool(msg.get("error"))
                    elif msg.get("type") == "session.done":
                        break
                with contextlib.suppress(Exception):
                    await ws.send(json.dumps({"type": "session.close"}))
        except InvalidStatus as exc:  # the handshake got an HTTP error (e.g. 503 while not ready)
            self._http_error(rec, exc.response.status_code, bytes(exc.response.body or b""))
            return
        except ConnectionClosed as exc:
            if not errors:  # closed with nothing said: a transport failure
                raise
            failed = True
            errors.append(f"connection closed ({exc})")
        if failed or errors:
            rec.outcome, rec.clear = ERROR, bool(errors)
            rec.message = "; ".join(errors) or "audio.done with error=true and no error message"
        elif rec.audio_bytes:
            rec.outcome = OK
        else:
            rec.outcome, rec.clear, rec.message = ERROR, False, "session.done without audio"

    async def _upload(self, rec: RequestRecord, text: str) -> None:
        name = f"soak-{self.run_id}-{next(self._names)}"
        rec.note = name
        resp = await self.client.post(
            "/v1/audio/voices",
            data={"name": name, "consent": f"soak-consent-{self.run_id}", "ref_text": text},
            files={"audio_sample": ("sample.wav", self._wav, "audio/wav")},
        )
        rec.status = resp.status_code
        if resp.status_code != 200:
            self._http_error(rec, resp.status_code, resp.content)
            return
        try:
            ok = bool(resp.json().get("success"))
        except ValueError:
            ok = False
        if ok:
            rec.outcome = OK
            self.uploaded.append(name)
        else:
            rec.outcome, rec.clear, rec.message = ERROR, False, f"200 without success: {resp.text[:200]}"

    async def probe(self) -> str | None:
        """One small non-streaming request: None when it succeeded, else why not."""
        try:
            resp = await self.client.post(
                "/v1/audio/speech", json=self.speech_body(TEXTS[0], response_format="wav", max_new_tokens=2),
                timeout=30,
            )
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}"
        if resp.status_code == 200 and resp.content[:4] == b"RIFF":
            return None
        return f"HTTP {resp.status_code}: {_error_message(resp.content) or resp.text[:200]}"


def _is_websocket_error(exc: BaseException) -> bool:
    return type(exc).__module__.startswith("websockets")


# --- faults ------------------------------------------------------------------------------------------


async def _ready(client: httpx.AsyncClient) -> bool:
    try:
        return (await client.get("/ready", timeout=5)).status_code == 200
    except httpx.HTTPError:
        return False


async def _recover(fault: FaultRecord, cfg: SoakConfig, runner: Runner, clock: _Clock) -> None:
    """Wait until /ready is 200 and a request succeeds; bounded by recovery_timeout_s."""
    assert fault.at is not None
    give_up = fault.at + cfg.recovery_timeout_s
    last = "never ready"
    while clock.now() < give_up:
        if await _ready(runner.client):
            fault.probes += 1
            error = await runner.probe()
            if error is None:
                fault.recovered_after_s = clock.now() - fault.at
                fault.window_end = clock.now()
                fault.note = ""
                log.info("%s: recovered after %.1f s", fault.kind, fault.recovered_after_s)
                return
            last = f"ready, but a request failed: {error}"
        else:
            last = "/ready is not 200"
        await asyncio.sleep(cfg.recovery_poll_s)
    fault.note = f"not recovered within {cfg.recovery_timeout_s:g} s (last: {last})"
    log.warning("%s: %s", fault.kind, fault.note)


def _kill(fault: FaultRecord, cfg: SoakConfig, clock: _Clock) -> None:
    """Find the target(s) and SIGKILL them; on any doubt, kill nothing and say why."""
    try:
        procs = list_processes()
        server = find_tritonserver(procs, cfg.triton_pid, cfg.triton_http_port)
        if fault.kind == "kill_stub":
            targets = find_stubs(procs, server.pid, cfg.kill_stub_model)
            if not targets:
                raise LookupError(f"no {STUB_NAME} of pid {server.pid} serves a model matching {cfg.kill_stub_model!r}")
            fault.target = ", ".join(stub_model(p) for p in targets)
        else:
            targets = [server]
            fault.target = f"{SERVER_NAME} pid {server.pid}"
    except Exception as exc:  # LookupError: ambiguous or missing; anything else: do not guess either
        fault.note = str(exc)
        log.error("%s skipped: %s", fault.kind, exc)
        return
    fault.at = clock.now()
    for p in targets:
        try:
            os.kill(p.pid, signal.SIGKILL)
            fault.pids.append(p.pid)
        except ProcessLookupError:
            log.warning("pid %d was already gone", p.pid)
    log.warning("%s: SIGKILL sent to %s (pids %s) at %.1f s", fault.kind, fault.target, fault.pids, fault.at)


async def _faults(cfg: SoakConfig, runner: Runner, clock: _Clock, faults: list[FaultRecord]) -> None:
    for fault in sorted(faults, key=lambda f: f.planned_at):
        if fault.planned_at >= cfg.duration_s:
            fault.note = f"planned at {fault.planned_at:g} s, after the end of the run ({cfg.duration_s:g} s)"
            continue
        await asyncio.sleep(max(0.0, fault.planned_at - clock.now()))
        _kill(fault, cfg, clock)
        if fault.at is not None:
            await _recover(fault, cfg, runner, clock)


# --- the run -----------------------------------------------------------------------------------------


async def soak(cfg: SoakConfig) -> SoakReport:
    cfg.validate()
    started = datetime.now(timezone.utc)
    report = SoakReport(config={k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()},
                        started_at=started.isoformat(timespec="seconds"))
    clock = _Clock(time.monotonic())
    rng = random.Random(cfg.seed)
    kinds = [k for k in KINDS if cfg.mix.get(k, 0) > 0]
    weights = [cfg.mix[k] for k in kinds]
    if cfg.kill_stub_at_s is not None:
        report.faults.append(FaultRecord("kill_stub", cfg.kill_stub_at_s))
    if cfg.kill_server_at_s is not None:
        report.faults.append(FaultRecord("kill_server", cfg.kill_server_at_s))
    if cfg.kill_every_s:
        n = 1
        while n * cfg.kill_every_s < cfg.duration_s:
            report.faults.append(FaultRecord("kill_stub" if n % 2 else "kill_server", n * cfg.kill_every_s))
            n += 1
    issued = itertools.count()
    # No read timeout: a response that never ends must surface as hung (our deadline), not as a
    # transport error. trust_env=False: never route loopback traffic through a proxy.
    timeout = httpx.Timeout(None, connect=10.0)
    # A connection for every worker (the overload phase's too: a smaller pool would queue them in this client).
    workers = cfg.concurrency + (cfg.overload_concurrency if cfg.overload_at_s is not None else 0)
    limits = httpx.Limits(max_connections=workers + 4, max_keepalive_connections=workers)
    async with httpx.AsyncClient(base_url=cfg.url, timeout=timeout, limits=limits, trust_env=False) as client:
        runner = Runner(cfg, client, clock, started.strftime("%H%M%S"))
        models = await runner.discover()
        fault_task = asyncio.create_task(_faults(cfg, runner, clock, report.faults))

        async def worker() -> None:
            while clock.now() < cfg.duration_s and next(issued) < cfg.max_requests:
                kind = rng.choices(kinds, weights)[0]
                rec = await runner.run(kind, rng.choice(TEXTS), rng.choice(models))
                report.requests.append(rec)
                if rec.outcome != OK:
                    await asyncio.sleep(cfg.error_backoff_s)

        async def overloader() -> None:  # raw streams, as fast as they end, for the overload phase
            assert cfg.overload_at_s is not None
            await asyncio.sleep(max(0.0, cfg.overload_at_s - clock.now()))
            end = min(cfg.duration_s, cfg.overload_at_s + cfg.overload_for_s)
            while clock.now() < end:
                rec = await runner.run("stream", rng.choice(TEXTS), rng.choice(models))
                rec.note = (rec.note + " overload").strip()
                report.requests.append(rec)
                if rec.outcome != OK:
                    await asyncio.sleep(cfg.error_backoff_s)

        extra = [overloader() for _ in range(cfg.overload_concurrency)] if cfg.overload_at_s is not None else []
        await asyncio.gather(*(worker() for _ in range(cfg.concurrency)), *extra)
        await fault_task  # bounded: every kill is before the end, each recovery by its timeout
        await _check_voices(report, runner)
        if not cfg.keep_voices:
            await _delete_voices(runner)
    report.voices_uploaded = list(runner.uploaded)
    report.requests.sort(key=lambda r: r.start)
    report.wall_s = clock.now()
    return report


async def _check_voices(report: SoakReport, runner: Runner) -> None:
    try:
        resp = await runner.client.get("/v1/audio/voices", timeout=30)
        resp.raise_for_status()
        body = resp.json()
    except (httpx.HTTPError, ValueError) as exc:
        report.voices_check_error = f"{type(exc).__name__}: {exc}"[:300]
        return
    listed = {str(v).lower() for v in body.get("voices", [])}
    listed |= {str(v.get("name", "")).lower() for v in body.get("uploaded_voices", []) if isinstance(v, dict)}
    report.voices_lost = [n for n in runner.uploaded if n.lower() not in listed]


async def _delete_voices(runner: Runner) -> None:
    failed: list[str] = []
    last = ""
    for name in runner.uploaded:
        try:
            resp = await runner.client.delete(f"/v1/audio/voices/{name}", timeout=30)
            if resp.status_code != 200:
                failed.append(name)
                last = f"HTTP {resp.status_code}"
        except httpx.HTTPError as exc:
            failed.append(name)
            last = f"{type(exc).__name__}: {exc}"
    if failed:
        log.warning("could not delete %d uploaded voices (%s; last error: %s)", len(failed), ", ".join(failed), last)


def run_soak(config: SoakConfig) -> SoakReport:
    """Run a soak to the end (blocking) and return its report; writes no files."""
    return asyncio.run(soak(config))


def write_report(report: SoakReport, out: Path | None = None, out_dir: Path = RESULTS_DIR) -> Path:
    if out is None:
        stamp = report.started_at.replace(":", "").replace("-", "").replace("+0000", "Z")
        out = out_dir / f"soak-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report.to_json(), indent=2))
    return out


# --- command line ------------------------------------------------------------------------------------


def parse_mix(text: str) -> dict[str, float]:
    """"speech=3,stream=3,sse=2" -> weights (unlisted kinds get 0)."""
    mix = {}
    for part in text.split(","):
        kind, _, weight = part.partition("=")
        mix[kind.strip()] = float(weight or 1)
    return mix


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="perf/soak.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default=SoakConfig.url, help="gateway base URL (loopback only)")
    ap.add_argument("--duration", type=float, default=SoakConfig.duration_s, help="seconds of traffic")
    ap.add_argument("--concurrency", type=int, default=SoakConfig.concurrency)
    ap.add_argument("--mix", type=parse_mix, default=None,
                    help=f"weights per kind, e.g. speech=3,stream=3,sse=2,websocket=2,upload=1,disconnect=1 (kinds: {', '.join(KINDS)})")
    ap.add_argument("--voice", default=SoakConfig.voice)
    ap.add_argument("--language", default=SoakConfig.language)
    ap.add_argument("--max-new-tokens", type=int, default=SoakConfig.max_new_tokens)
    ap.add_argument("--request-timeout", type=float, default=SoakConfig.request_timeout_s,
                    help="a request with no end by then counts as hung")
    ap.add_argument("--max-requests", type=int, default=SoakConfig.max_requests)
    ap.add_argument("--error-backoff", type=float, default=SoakConfig.error_backoff_s,
                    help="seconds a worker pauses after a failed request")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kill-stub-at", type=float, help="seconds into the run: SIGKILL the speech_generation stub(s) once")
    ap.add_argument("--kill-stub-model", default=SoakConfig.kill_stub_model,
                    help="substring of the stub's model path (default: every speech_generation* model)")
    ap.add_argument("--kill-server-at", type=float, help="seconds into the run: SIGKILL tritonserver once")
    ap.add_argument("--kill-every", type=float,
                    help="every so many seconds, SIGKILL the stubs, then tritonserver, then the stubs... in turn")
    ap.add_argument("--models", type=lambda v: [m.strip() for m in v.split(",") if m.strip()],
                    help="'all' (every served model) or a comma-separated list; default: the gateway's default model")
    ap.add_argument("--model-max-new-tokens", type=parse_mix, default={},
                    help="a model's own max_new_tokens, e.g. MODEL=0 (0: left out, for a model that refuses fewer "
                         "frames than its text needs)")
    ap.add_argument("--overload-at", type=float, help="seconds into the run: start the overload phase")
    ap.add_argument("--overload-for", type=float, default=SoakConfig.overload_for_s)
    ap.add_argument("--overload-concurrency", type=int, default=0, help="extra workers sending raw streams")
    ap.add_argument("--triton-pid", type=int, help="the tritonserver to kill (else found by --triton-http-port)")
    ap.add_argument("--triton-http-port", type=int, help="find tritonserver by its --http-port")
    ap.add_argument("--recovery-timeout", type=float, default=SoakConfig.recovery_timeout_s)
    ap.add_argument("--keep-voices", action="store_true", help="do not delete the uploaded voices at the end")
    ap.add_argument("--out", type=Path, help="JSON result file (default perf/results/soak-<time>.json)")
    ap.add_argument("--log-level", default="INFO")
    args = ap.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(message)s")
    cfg = SoakConfig(
        url=args.url, duration_s=args.duration, concurrency=args.concurrency, mix=args.mix or dict(DEFAULT_MIX),
        voice=args.voice, language=args.language, max_new_tokens=args.max_new_tokens,
        request_timeout_s=args.request_timeout, max_requests=args.max_requests, error_backoff_s=args.error_backoff,
        seed=args.seed,
        kill_stub_at_s=args.kill_stub_at, kill_stub_model=args.kill_stub_model, kill_server_at_s=args.kill_server_at,
        triton_pid=args.triton_pid, triton_http_port=args.triton_http_port, recovery_timeout_s=args.recovery_timeout,
        keep_voices=args.keep_voices, models=args.models,
        model_max_new_tokens={k: int(v) for k, v in args.model_max_new_tokens.items()}, kill_every_s=args.kill_every,
        overload_at_s=args.overload_at, overload_for_s=args.overload_for,
        overload_concurrency=args.overload_concurrency,
    )
    try:
        report = run_soak(cfg)
    except ValueError as exc:
        ap.error(str(exc))
    path = write_report(report, args.out)
    print(report.table())
    print(f"\nfull record: {path}")
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
