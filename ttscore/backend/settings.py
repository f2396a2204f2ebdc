"""Typed settings of the Triton models, parsed strictly from their config.pbtxt (fail fast in initialize)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ttscore.contract import manifest as contract_manifest
from ttscore.contract import tensors
from ttscore.contract.errors import ArtifactError, TTSError
from ttscore.contract.manifest import Manifest
from ttscore.contract.rules import DEFAULT_RUNAWAY_FACTOR, DEFAULT_RUNAWAY_MIN_S
from ttscore.runtime import engine
from ttscore.runtime.onnx import THREAD_POOLS

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


def _float_param(model: str, params: Mapping[str, str], key: str, default: float, minimum: float) -> float:
    raw = params.get(key, "").strip()
    if raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ModelSettingsError(f"{model}: parameter {key} must be a number, got {raw!r}") from None
    if not value >= minimum or value == float("inf"):
        raise ModelSettingsError(f"{model}: parameter {key} must be a finite number >= {minimum:g}, got {raw}")
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
            import onnxruntime as ort

            if "CUDAExecutionProvider" not in ort.get_available_providers():
                raise ModelSettingsError(
                    "instance kind KIND_GPU needs onnxruntime-gpu (CUDAExecutionProvider is not available)"
                )
        else:
            os.environ["TTS_DEVICE"] = "cpu"


# speech_generation's keep-alive interval, seconds (ttscore.backend.generation)
DEFAULT_KEEPALIVE_S = 5


@dataclass(frozen=True)
class SpeechGenerationSettings:
    artifacts_dir: Path
    max_active_requests: int  # requests decoded together in one step (Generator max_batch)
    max_pending_requests: int  # admitted but waiting for a slot; beyond this: UNAVAILABLE
    intra_op_threads: int  # 0 = ONNX Runtime default
    vocoder: str = "inline"  # "inline": in-process ORT session; else the code2wav model called by BLS
    # "session": a blocking ONNX Runtime pool per graph (the default: Triton, its clients and the
    # gateway share the cores); "shared": one spinning pool for every graph of the process
    # (ttscore.runtime.onnx.share_thread_pool), for a model with cores to itself.
    thread_pool: str = "session"

    chunk_policy: str = engine.DEFAULT_CHUNK_POLICY  # chunk sizes after the first (ttscore.runtime.engine)
    prefill_token_budget: int = engine.DEFAULT_PREFILL_BUDGET  # prompt positions prefilled per step, batched across joins
    # an inline vocoder decodes streams' later chunks beside the next model step: "on", "off", or "auto" (where the
    # family declares it safe; ttscore.runtime.engine)
    vocoder_overlap: str = engine.DEFAULT_VOCODER_OVERLAP
    # seconds: a streaming request sent nothing for this long (the server alive) gets a keep-alive (0: never;
    # ttscore.backend.generation); keep it well under the gateway's stall_timeout_s
    keepalive_s: int = DEFAULT_KEEPALIVE_S
    # The runaway guard (ttscore.contract.rules.runaway_frames): a generation ends with finish_reason "length" once
    # its audio passes runaway_min_s + runaway_factor x the family's seconds per text token x its text tokens
    # (0: off; max_new_tokens still caps it either way).
    runaway_factor: float = DEFAULT_RUNAWAY_FACTOR
    runaway_min_s: float = DEFAULT_RUNAWAY_MIN_S

    PARAMETERS = (
        "artifacts_dir",
        "max_active_requests",
        "max_pending_requests",
        "intra_op_threads",
        "vocoder",
        "thread_pool",
        "chunk_policy",
        "prefill_token_budget",
        "vocoder_overlap",
        "keepalive_s",
        "runaway_factor",
        "runaway_min_s",
    )

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
            max_active_requests=_int_param(name, params, "max_active_requests", tensors.MAX_ACTIVE_REQUESTS, 1),
            max_pending_requests=_int_param(name, params, "max_pending_requests", 64, 0),
            intra_op_threads=_int_param(name, params, "intra_op_threads", 0, 0),
            vocoder=str(params.get("vocoder", "inline") or "inline"),
            thread_pool=_choice_param(name, params, "thread_pool", "session", THREAD_POOLS),
            chunk_policy=_choice_param(
                name, params, "chunk_policy", engine.DEFAULT_CHUNK_POLICY, engine.CHUNK_POLICIES
            ),
            prefill_token_budget=_int_param(name, params, "prefill_token_budget", engine.DEFAULT_PREFILL_BUDGET, 1),
            vocoder_overlap=_choice_param(name, params, "vocoder_overlap", engine.DEFAULT_VOCODER_OVERLAP,
                                          engine.VOCODER_OVERLAP_CHOICES),
            keepalive_s=_int_param(name, params, "keepalive_s", DEFAULT_KEEPALIVE_S, 0),
            runaway_factor=_float_param(name, params, "runaway_factor", DEFAULT_RUNAWAY_FACTOR, 0.0),
            runaway_min_s=_float_param(name, params, "runaway_min_s", DEFAULT_RUNAWAY_MIN_S, 0.0),
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
    from ttscore.runtime.onnx import OnnxGraph

    graphs = settings.manifest.graphs
    entry = graphs.get(graph_name)
    if not isinstance(entry, Mapping) or "file" not in entry:
        raise ModelSettingsError(f"{model}: {settings.artifacts_dir}/manifest.json has no graph {graph_name!r}")
    try:
        return OnnxGraph(settings.artifacts_dir / entry["file"], dict(entry), settings.intra_op_threads or None)
    except ArtifactError as exc:
        raise ModelSettingsError(f"{model}: {exc}") from None
