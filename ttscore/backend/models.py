"""Logic of the Triton python-backend models, kept free of `triton_python_backend_utils`.

Each `model_repository/<model>/1/model.py` is thin glue: it parses its config with a settings class
from here, adapts pb_utils requests/response senders to plain numpy dicts and the `ResponseStream`
protocol, and delegates. Everything here is unit-tested without Triton (tests/test_models_*.py),
and the same code runs inside the real server (tests/test_triton_*.py).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ttscore.backend.triton_metrics import NullMetrics, SchedulerMetrics
from ttscore.contract import manifest as contract_manifest
from ttscore.contract import qwen3_tts as spec
from ttscore.contract import tensors as triton_io
from ttscore.contract.errors import ArtifactError, InvalidRequest, TTSError
from ttscore.contract.manifest import Manifest
from ttscore.contract.tensors import CANCELLED, INTERNAL, INTERNAL_MESSAGE, UNAVAILABLE, WireError

log = logging.getLogger(__name__)


class ModelSettingsError(TTSError):
    """A model's config.pbtxt (or the artifacts it points at) cannot serve: fail initialize."""


# --- settings -----------------------------------------------------------------------------------


def model_parameters(model_config: Mapping[str, Any]) -> dict[str, str]:
    """`parameters { key: .. value { string_value: .. } }` of a model_config JSON as a flat dict."""
    params = model_config.get("parameters") or {}
    return {k: str(v.get("string_value", "")) if isinstance(v, Mapping) else str(v) for k, v in params.items()}


def _known_parameters(model: str, params: Mapping[str, str], allowed: Sequence[str]) -> None:
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ModelSettingsError(
            f"{model}: unknown parameter(s) {', '.join(unknown)} (allowed: {', '.join(sorted(allowed))})"
        )


def _int_param(model: str, params: Mapping[str, str], key: str, default: int, minimum: int) -> int:
    raw = params.get(key, "").strip()
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ModelSettingsError(f"{model}: parameter {key} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise ModelSettingsError(f"{model}: parameter {key} must be >= {minimum}, got {value}")
    return value


def _choice_param(model: str, params: Mapping[str, str], key: str, default: str, choices: Sequence[str]) -> str:
    raw = params.get(key, "").strip()
    if raw == "":
        return default
    if raw not in choices:
        raise ModelSettingsError(f"{model}: parameter {key} must be one of {', '.join(choices)}, got {raw!r}")
    return raw


def _artifacts_dir(model: str, params: Mapping[str, str]) -> Path:
    raw = params.get("artifacts_dir", "").strip()
    if not raw:
        raise ModelSettingsError(f"{model}: parameter artifacts_dir is required")
    path = Path(raw)
    if not path.is_dir():
        raise ModelSettingsError(
            f"{model}: artifacts_dir {path} does not exist (export a checkpoint with `triton-tts export` "
            "and render the repository with `python -m ttscore.backend.repository --artifacts-dir ...`)"
        )
    return path


def read_manifest(model: str, artifacts_dir: Path) -> Manifest:
    try:
        return contract_manifest.read_manifest(artifacts_dir)
    except ArtifactError as exc:
        raise ModelSettingsError(f"{model}: {exc}") from None


@dataclass(frozen=True)
class Instance:
    """Where this model instance runs (python backend args: model_instance_kind / _device_id)."""

    kind: str = "CPU"
    device_id: int = 0

    @classmethod
    def from_args(cls, args: Mapping[str, Any]) -> Instance:
        return cls(str(args.get("model_instance_kind", "CPU")).upper(), int(args.get("model_instance_device_id", 0)))

    def configure_process(self) -> None:
        """Point ONNX Runtime at this instance's device. Each python-backend instance is its own stub
        process, so its environment is per instance. CUDA_VISIBLE_DEVICES is deliberately left alone
        (the stub may already have initialised CUDA); TTS_CUDA_DEVICE carries the device id instead."""
        if self.kind == "GPU":
            os.environ["TTS_DEVICE"] = "gpu"
            os.environ["TTS_CUDA_DEVICE"] = str(self.device_id)
            import onnxruntime as ort  # noqa: PLC0415

            if "CUDAExecutionProvider" not in ort.get_available_providers():
                raise ModelSettingsError(
                    "instance kind KIND_GPU needs onnxruntime-gpu (CUDAExecutionProvider is not available)"
                )
        else:
            os.environ["TTS_DEVICE"] = "cpu"


@dataclass(frozen=True)
class SpeechGenerationSettings:
    artifacts_dir: Path
    max_active_requests: int  # requests decoded together in one step (Generator max_batch)
    max_pending_requests: int  # admitted but waiting for a slot; beyond this: UNAVAILABLE
    intra_op_threads: int  # 0 = ONNX Runtime default
    vocoder: str = "inline"  # "inline": in-process ORT session; else the code2wav model called by BLS
    chunk_policy: str = "adaptive"  # chunk sizes after the first (ttscore.runtime.engine)
    prefill_token_budget: int = 256  # prompt positions prefilled per step, batched across joins

    PARAMETERS = (
        "artifacts_dir",
        "max_active_requests",
        "max_pending_requests",
        "intra_op_threads",
        "vocoder",
        "chunk_policy",
        "prefill_token_budget",
    )
    CHUNK_POLICIES = ("adaptive", "ramp", "fixed")  # == ttscore.runtime.engine.CHUNK_POLICIES

    @classmethod
    def from_model_config(cls, model_config: Mapping[str, Any], check_artifacts: bool = True) -> SpeechGenerationSettings:
        name = str(model_config.get("name", "speech_generation"))
        policy = model_config.get("model_transaction_policy") or {}
        if not policy.get("decoupled", False):
            raise ModelSettingsError(f"{name}: must be decoupled (model_transaction_policy {{ decoupled: true }})")
        if int(model_config.get("max_batch_size", 0)) != 0:
            raise ModelSettingsError(f"{name}: max_batch_size must be 0 (the generator batches by itself)")
        params = model_parameters(model_config)
        _known_parameters(name, params, cls.PARAMETERS)
        artifacts = _artifacts_dir(name, params)
        if check_artifacts:
            read_manifest(name, artifacts)
        return cls(
            artifacts_dir=artifacts,
            max_active_requests=_int_param(name, params, "max_active_requests", 8, 1),
            max_pending_requests=_int_param(name, params, "max_pending_requests", 64, 0),
            intra_op_threads=_int_param(name, params, "intra_op_threads", 0, 0),
            vocoder=str(params.get("vocoder", "inline") or "inline"),
            chunk_policy=_choice_param(name, params, "chunk_policy", "adaptive", cls.CHUNK_POLICIES),
            prefill_token_budget=_int_param(name, params, "prefill_token_budget", 256, 1),
        )


@dataclass(frozen=True)
class OrtModelSettings:
    """code2wav, speaker_encoder, speech_encoder, audio_preprocess: artifacts + threads."""

    artifacts_dir: Path
    intra_op_threads: int
    manifest: Manifest = field(repr=False, compare=False)

    PARAMETERS = ("artifacts_dir", "intra_op_threads")

    @classmethod
    def from_model_config(cls, model_config: Mapping[str, Any]) -> OrtModelSettings:
        name = str(model_config.get("name", "?"))
        params = model_parameters(model_config)
        _known_parameters(name, params, cls.PARAMETERS)
        artifacts = _artifacts_dir(name, params)
        return cls(artifacts, _int_param(name, params, "intra_op_threads", 0, 0), read_manifest(name, artifacts))


def open_graph(model: str, settings: OrtModelSettings, graph_name: str) -> Any:
    """A ttscore.runtime.onnx.OnnxGraph of the manifest's `graph_name`, checked against the artifacts."""
    from ttscore.runtime.onnx import OnnxGraph  # noqa: PLC0415

    graphs = settings.manifest.graphs
    entry = graphs.get(graph_name)
    if not isinstance(entry, Mapping) or "file" not in entry:
        raise ModelSettingsError(f"{model}: {settings.artifacts_dir}/manifest.json has no graph {graph_name!r}")
    try:
        return OnnxGraph(settings.artifacts_dir / entry["file"], dict(entry), settings.intra_op_threads or None)
    except ArtifactError as exc:
        raise ModelSettingsError(f"{model}: {exc}") from None


# --- code2wav: gather, run once per frame count, scatter ----------------------------------------


@dataclass(frozen=True)
class CodecFacts:
    state_size: int
    num_groups: int
    samples_per_frame: int
    codebook_size: int | None  # None: codes are not range-checked


def codec_facts(model: str, manifest: Manifest, artifacts_dir: Path) -> CodecFacts:
    state_size = manifest.code2wav_state_size
    if state_size is None:
        raise ModelSettingsError(f"{model}: manifest.json has no code2wav.state_size")
    groups, spf, codebook = spec.NUM_CODE_GROUPS, spec.SAMPLES_PER_FRAME, None
    cfg = manifest.configs
    if cfg:
        from ttscore.runtime.families.qwen3_tts.checkpoint import parse_configs  # noqa: PLC0415

        info = parse_configs(
            cfg["config.json"], cfg["speech_tokenizer/config.json"], cfg["generation_config.json"], artifacts_dir
        )
        groups, spf, codebook = info.num_code_groups, info.samples_per_frame, info.codebook_size
    return CodecFacts(state_size, groups, spf, codebook)


def check_state_dims(model: str, config_dims: Sequence[int], state_size: int, tensor: str) -> None:
    """config.pbtxt may leave the state dim as -1; a fixed one must equal the manifest."""
    dims = [int(d) for d in config_dims]
    if dims not in ([-1], [state_size]):
        raise ModelSettingsError(f"{model}: {tensor} dims {dims} do not match the manifest state_size {state_size}")


@dataclass
class Code2WavItem:
    """One request's rows: codes [b, F, G], state [b, S], position [b]."""

    codes: np.ndarray
    state: np.ndarray
    position: np.ndarray

    @property
    def rows(self) -> int:
        return int(self.codes.shape[0])

    @property
    def frames(self) -> int:
        return int(self.codes.shape[1])


def code2wav_item(tensors: Mapping[str, np.ndarray], facts: CodecFacts) -> Code2WavItem:
    """Validate one request's tensors (with Triton's batch dim). Raises InvalidRequest naming the tensor."""
    codes, state, position = (np.asarray(tensors[n]) if n in tensors else None for n in ("codes", "state", "position"))
    for name, value in (("codes", codes), ("state", state), ("position", position)):
        if value is None:
            raise InvalidRequest(f"input '{name}' is required", name)
    assert codes is not None and state is not None and position is not None
    if codes.ndim != 3 or codes.shape[2] != facts.num_groups:
        raise InvalidRequest(f"input 'codes' must have shape [batch, frames, {facts.num_groups}]", "codes")
    b = codes.shape[0]
    if state.shape != (b, facts.state_size):
        raise InvalidRequest(f"input 'state' must have shape [batch, {facts.state_size}], got {list(state.shape)}", "state")
    if position.size != b:
        raise InvalidRequest("input 'position' must hold one value per batch row", "position")
    position = position.reshape(b).astype(np.int64)
    if codes.size and (codes.min() < 0 or (facts.codebook_size is not None and codes.max() >= facts.codebook_size)):
        raise InvalidRequest(f"input 'codes' must be in [0, {facts.codebook_size})", "codes")
    if np.any(position < 0):
        raise InvalidRequest("input 'position' must be >= 0", "position")
    if not np.all(np.isfinite(state)):
        raise InvalidRequest("input 'state' must be finite", "state")
    return Code2WavItem(codes.astype(np.int64, copy=False), state.astype(np.float32, copy=False), position)


Code2WavResult = tuple[np.ndarray, np.ndarray]  # pcm [b, F*spf], new_state [b, S]


def run_code2wav(
    run: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]],
    items: Sequence[Code2WavItem | WireError],
) -> list[Code2WavResult | WireError]:
    """Batch every valid item by frame count, run once per group, scatter back in order.

    A failing group run is retried item by item, so one bad request fails alone (INTERNAL for
    that request only, logged) and its neighbours still get audio.
    """
    results: list[Code2WavResult | WireError | None] = [None] * len(items)
    groups: dict[int, list[int]] = {}
    for i, item in enumerate(items):
        if isinstance(item, WireError):
            results[i] = item
        elif item.rows == 0:
            results[i] = (np.zeros((0, 0), np.float32), np.zeros_like(item.state))
        else:
            groups.setdefault(item.frames, []).append(i)

    def one_run(idx: list[int]) -> None:
        batch = [items[i] for i in idx]
        assert all(isinstance(b, Code2WavItem) for b in batch)
        out = run(
            {
                "codes": np.concatenate([b.codes for b in batch]),  # type: ignore[union-attr]
                "state": np.concatenate([b.state for b in batch]),  # type: ignore[union-attr]
                "position": np.concatenate([b.position for b in batch]),  # type: ignore[union-attr]
            }
        )
        pcm, new_state = out["pcm"], out["new_state"]
        row = 0
        for i, b in zip(idx, batch, strict=True):
            n = b.rows  # type: ignore[union-attr]
            results[i] = (np.ascontiguousarray(pcm[row : row + n]), np.ascontiguousarray(new_state[row : row + n]))
            row += n

    for idx in groups.values():
        try:
            one_run(idx)
        except Exception:
            if len(idx) == 1:
                log.exception("code2wav failed for one request")
                results[idx[0]] = WireError(INTERNAL, INTERNAL_MESSAGE)
                continue
            log.warning("code2wav batch of %d failed; retrying its requests one by one", len(idx), exc_info=True)
            for i in idx:
                try:
                    one_run([i])
                except Exception:
                    log.exception("code2wav failed for one request")
                    results[i] = WireError(INTERNAL, INTERNAL_MESSAGE)
    return [r if r is not None else WireError(INTERNAL, INTERNAL_MESSAGE) for r in results]


def request_from_tensors(tensors: Mapping[str, np.ndarray]) -> Any:
    """A SynthesisRequest from a speech_generation request; raises InvalidRequest naming the tensor."""
    from ttscore.runtime.families.qwen3_tts.request import SynthesisRequest  # noqa: PLC0415

    return SynthesisRequest(**triton_io.request_kwargs(tensors))


# --- speech_generation: the step loop -----------------------------------------------------------


class ResponseStream(Protocol):
    """One request's decoupled response sender, as the scheduler sees it."""

    def send(self, outputs: dict[str, np.ndarray] | None, error: WireError | None, final: bool) -> None: ...

    def is_cancelled(self) -> bool: ...


class GeneratorLike(Protocol):
    @property
    def num_active(self) -> int: ...

    def submit(self, req_id: str, request: Any) -> None: ...

    def step(self, emit: Callable[[list[Any]], None] | None = None) -> list[Any]: ...

    def cancel(self, req_id: str) -> bool: ...


def load_generator(settings: SpeechGenerationSettings) -> GeneratorLike:
    """The production generator: Pipeline (ONNX Runtime sessions) + continuous batching."""
    from ttscore.runtime.engine import Generator  # noqa: PLC0415  (heavy; only inside the server)
    from ttscore.runtime.families.qwen3_tts.pipeline import Pipeline  # noqa: PLC0415

    inline = settings.vocoder == "inline"
    try:
        # Voice features come from the voice_features ensemble, so this model never loads the
        # encoders; with a BLS vocoder it does not load code2wav either.
        pipeline = Pipeline.load(
            settings.artifacts_dir, threads=settings.intra_op_threads or None, vocoder=inline, encoders=False
        )
    except ArtifactError as exc:
        raise ModelSettingsError(f"speech_generation: {exc}") from None
    vocoder = None
    if not inline:
        from ttscore.backend.glue import BlsVocoder  # noqa: PLC0415  (pb_utils: only inside the stub)

        vocoder = BlsVocoder(settings.vocoder, pipeline.state_size)
    log.info(
        "KV arena: %d bytes per cached position per request; a request holds at most prompt + max_new_tokens "
        "positions (%.1f MiB at the default %d new tokens and a 32-position prompt)",
        pipeline.arena.bytes_per_position,
        pipeline.arena.bytes_per_position * (32 + spec.DEFAULT_MAX_NEW_TOKENS) / 2**20,
        spec.DEFAULT_MAX_NEW_TOKENS,
    )
    return Generator(
        pipeline,
        max_batch=settings.max_active_requests,
        vocoder=vocoder,
        chunk_policy=settings.chunk_policy,
        prefill_budget=settings.prefill_token_budget,
    )


@dataclass
class _Entry:
    req_id: str  # our own unique id (Triton request ids may be empty or repeated)
    triton_id: str
    request: Any
    stream: ResponseStream
    done: bool = False


@dataclass
class SchedulerStats:
    steps: int = 0
    submitted: int = 0
    completed: int = 0
    cancelled: int = 0
    rejected: int = 0
    failed: int = 0
    step_seconds: float = 0.0
    outside_seconds: float = 0.0  # of step_seconds, outside model calls (StepProfile.outside_seconds)


class GenerationScheduler:
    """Feeds a Generator from a thread-safe inbox and streams its chunks back.

    Protocol obligation: EXACTLY ONE response with the FINAL flag per request on every path --
    the final chunk (success), INVALID_ARG (rejected at submit), CANCELLED (client cancelled),
    UNAVAILABLE (queue full / shutting down) or INTERNAL (unexpected exception, logged). `_finish`
    is the only place that sends FINAL and it refuses to send twice.

    Threading: `submit` is called from Triton's execute(); everything else runs on the loop
    thread, which alone touches the Generator (it is not thread-safe).
    """

    def __init__(
        self,
        generator: GeneratorLike,
        max_active: int,
        max_pending: int,
        idle_wait_s: float = 0.05,
        metrics: SchedulerMetrics | None = None,
    ) -> None:
        self.generator = generator
        self.metrics: SchedulerMetrics = metrics or NullMetrics()  # ttscore.backend.triton_metrics
        self.max_active = max_active
        self.max_pending = max_pending
        self.idle_wait_s = idle_wait_s
        self.stats = SchedulerStats()
        self._inbox: queue.Queue[_Entry] = queue.Queue()
        self._pending: deque[_Entry] = deque()
        self._active: dict[str, _Entry] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ids = 0
        self._lock = threading.Lock()
        self._waiting = 0  # inbox + pending, for admission control from execute()

    # --- called from execute() ------------------------------------------------------------------

    def submit(self, request: Any, stream: ResponseStream, triton_id: str = "") -> str:
        entry = _Entry("", triton_id, request, stream)
        error: WireError | None = None
        # Under the lock, so stop() cannot drain the inbox between the check and the put.
        with self._lock:
            self._ids += 1
            entry.req_id = f"r{self._ids}"
            free_slots = max(0, self.max_active - len(self._active))
            if self._stop.is_set():
                error = WireError(UNAVAILABLE, "server is shutting down")
            elif self._waiting >= self.max_pending + free_slots:
                error = WireError(UNAVAILABLE, "too many requests in the queue; retry later")
            else:
                self._waiting += 1
                self._inbox.put(entry)
        if error is not None:
            self._ended("rejected")
            self._finish(entry, error=error)
        return entry.req_id

    def reject(self, stream: ResponseStream, error: WireError) -> None:
        """FINAL error for a request that never reached the queue (e.g. undecodable tensors)."""
        self._ended("rejected")
        self._finish(_Entry("-", "", None, stream), error=error)

    # --- loop thread ----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="speech-generation-steps", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Signal, join, then fail whatever is left (UNAVAILABLE + FINAL)."""
        with self._lock:
            self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.error("step loop did not stop within %.0f s", timeout_s)
                return  # it still owns the generator; the process is going away
        self._drain_inbox()
        for entry in list(self._active.values()) + list(self._pending):
            self._ended("failed" if entry.req_id in self._active else "rejected")
            self._abort(entry, WireError(UNAVAILABLE, "server is shutting down"))
        self._pending.clear()
        self.metrics.load(0, 0)

    @property
    def num_active(self) -> int:
        return len(self._active)

    @property
    def num_pending(self) -> int:
        return len(self._pending) + self._inbox.qsize()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                busy = self.run_once()
            except Exception:  # a bug in the loop itself must not kill the thread silently
                log.exception("step loop iteration failed")
                self._fail_active()
                busy = False
            if not busy:
                try:
                    entry = self._inbox.get(timeout=self.idle_wait_s)
                except queue.Empty:
                    continue
                self._pending.append(entry)

    def run_once(self) -> bool:
        """One iteration: admit, drop cancelled, one generator step, stream its chunks.
        Returns False when there was nothing to do."""
        self._drain_inbox()
        self._admit()
        self._drop_cancelled()
        self.metrics.load(self.num_pending, len(self._active))
        if not self._active:
            return bool(self._pending)
        batch = len(self._active)
        t0 = time.perf_counter()
        try:
            # First chunks made by a prefill go out at once, before the batch's decode step.
            events = self.generator.step(self._dispatch)
        except Exception:
            log.exception("generator step failed; failing its %d active requests", len(self._active))
            self._fail_active()
            return True
        seconds = time.perf_counter() - t0
        self.stats.steps += 1
        self.stats.step_seconds += seconds
        self.metrics.step(batch, seconds)
        # The production Generator profiles its steps (ttscore.runtime.engine.StepProfile); test
        # doubles need not.
        profile = getattr(self.generator, "last_step", None)
        if profile is not None:
            self.stats.outside_seconds += profile.outside_seconds
            memory = getattr(getattr(self.generator, "model", None), "memory", None)
            kv = memory().get("kv_arena_bytes", 0) if callable(memory) else 0
            self.metrics.profile(profile.outside_seconds, kv)
        self._dispatch(events)
        if self._active and self.generator.num_active == 0:
            # Safety net: the generator dropped requests without a final event.
            log.error("generator lost %d requests", len(self._active))
            self._fail_active()
        self.metrics.load(self.num_pending, len(self._active))
        return True

    def _dispatch(self, events: list[Any]) -> None:
        """Send each chunk event to its request's stream (FINAL for the last one)."""
        for event in events:
            entry = self._active.get(event.req_id)
            if entry is None:  # cancelled meanwhile
                continue
            try:
                outputs = triton_io.chunk_outputs(event)
            except Exception:
                log.exception("bad chunk event for %s", entry.triton_id or entry.req_id)
                self._ended("failed")
                self._abort(entry, WireError(INTERNAL, INTERNAL_MESSAGE))
                continue
            if event.final:
                self._active.pop(entry.req_id, None)
                self._ended("completed")
                self._finish(entry, outputs=outputs)
            elif not self._send(entry, outputs):
                self._ended("cancelled")  # the client went away
                self._abort(entry, None)

    def _drain_inbox(self) -> None:
        while True:
            try:
                self._pending.append(self._inbox.get_nowait())
            except queue.Empty:
                return

    def _admit(self) -> None:
        while self._pending and len(self._active) < self.max_active:
            entry = self._pending.popleft()
            with self._lock:
                self._waiting -= 1
            if self._cancelled(entry):
                self._ended("cancelled")
                self._finish(entry, error=WireError(CANCELLED, "request cancelled"))
                continue
            t0 = time.perf_counter()
            try:
                self.generator.submit(entry.req_id, entry.request)  # prompt + prefill
            except InvalidRequest as exc:
                self._ended("rejected")
                self._finish(entry, error=triton_io.invalid_request_error(exc))
                continue
            except Exception:
                log.exception("submit failed for %s", entry.triton_id or entry.req_id)
                self._ended("failed")
                self._finish(entry, error=WireError(INTERNAL, INTERNAL_MESSAGE))
                continue
            self.metrics.prefill(time.perf_counter() - t0)
            self.stats.submitted += 1
            self._active[entry.req_id] = entry

    def _drop_cancelled(self) -> None:
        for entry in list(self._active.values()):
            if self._cancelled(entry):
                self._ended("cancelled")
                log.info("request %s cancelled by the client; released", entry.triton_id or entry.req_id)
                self._abort(entry, WireError(CANCELLED, "request cancelled"))

    def _fail_active(self) -> None:
        for entry in list(self._active.values()):
            self._ended("failed")
            self._abort(entry, WireError(INTERNAL, INTERNAL_MESSAGE))

    def _abort(self, entry: _Entry, error: WireError | None) -> None:
        """Remove from the generator (frees its KV cache now) and send the FINAL error."""
        self._active.pop(entry.req_id, None)
        try:
            self.generator.cancel(entry.req_id)
        except Exception:
            log.exception("generator.cancel failed for %s", entry.req_id)
        self._finish(entry, error=error or WireError(INTERNAL, INTERNAL_MESSAGE))

    def _ended(self, outcome: str) -> None:
        """Count how a request ended (stats + metrics; outcomes: ttscore.backend.triton_metrics.OUTCOMES)."""
        setattr(self.stats, outcome, getattr(self.stats, outcome) + 1)
        self.metrics.finished(outcome)

    @staticmethod
    def _cancelled(entry: _Entry) -> bool:
        try:
            return bool(entry.stream.is_cancelled())
        except Exception:
            log.exception("is_cancelled failed; treating the request as cancelled")
            return True

    @staticmethod
    def _send(entry: _Entry, outputs: dict[str, np.ndarray]) -> bool:
        try:
            entry.stream.send(outputs, None, False)
            return True
        except Exception:
            log.warning("send failed for %s; dropping it", entry.triton_id or entry.req_id, exc_info=True)
            return False

    @staticmethod
    def _finish(
        entry: _Entry, outputs: dict[str, np.ndarray] | None = None, error: WireError | None = None
    ) -> None:
        if entry.done:
            log.error("refusing a second FINAL for %s", entry.triton_id or entry.req_id)
            return
        entry.done = True
        try:
            entry.stream.send(outputs, error, True)
        except Exception:
            log.warning("final send failed for %s", entry.triton_id or entry.req_id, exc_info=True)


# --- voice features: audio_preprocess -----------------------------------------------------------



def preprocess_reference(
    audio: np.ndarray, sample_rate: int, mel_filters: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Reference clip -> (24 kHz audio, log-mel [frames, 128]); see ttscore.runtime.audio.prepare_reference."""
    from ttscore.runtime.audio import prepare_reference  # noqa: PLC0415

    return prepare_reference(audio, sample_rate, mel_filters, param="audio", rate_param="sample_rate")


def mel_filters(model: str, artifacts_dir: Path) -> np.ndarray:
    path = artifacts_dir / f"{spec.MEL_FILTERS}.npy"
    if not path.is_file():
        raise ModelSettingsError(f"{model}: {path} is missing (voice features need a Base checkpoint export)")
    return np.asarray(np.load(path), dtype=np.float32)
