"""Recording fake of Triton's `triton_python_backend_utils` (python backend 2.51 API surface).

Injected into `sys.modules["triton_python_backend_utils"]` by tests/triton_tests/test_models_*.py before a
`model.py` is loaded (see tests/fakes/loader.py). The response sender records every send() with
its flags and, like the real one, refuses any send after the FINAL flag, so a second FINAL fails
the test instead of passing silently.
"""

from __future__ import annotations

import itertools
import json
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2

TRITON_STRING_TO_NUMPY = {
    "TYPE_BOOL": bool,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}


def triton_string_to_numpy(triton_type_string: str) -> Any:
    return TRITON_STRING_TO_NUMPY[triton_type_string]


class TritonError(Exception):
    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    _NAMES = {0: "UNKNOWN", 1: "INTERNAL", 2: "NOT_FOUND", 3: "INVALID_ARG", 4: "UNAVAILABLE",
              5: "UNSUPPORTED", 6: "ALREADY_EXISTS", 7: "CANCELLED"}

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self._message = message
        self._code = code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    @property
    def code_name(self) -> str:
        return self._NAMES.get(self._code, str(self._code))

    def __repr__(self) -> str:
        return f"TritonError({self.code_name}, {self._message!r})"


class Tensor:
    def __init__(self, name: str, value: Any) -> None:
        if not isinstance(value, np.ndarray):
            raise TypeError(f"Tensor {name}: expected a numpy array, got {type(value).__name__}")
        self._name = name
        self._value = value

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._value

    def is_cpu(self) -> bool:
        return True

    def shape(self) -> tuple[int, ...]:
        return tuple(self._value.shape)

    def __repr__(self) -> str:
        return f"Tensor({self._name}, {self._value.dtype}, {list(self._value.shape)})"


class InferenceResponse:
    def __init__(self, output_tensors: list[Tensor] | None = None, error: TritonError | None = None) -> None:
        self._tensors = list(output_tensors or [])
        self._error = error

    def output_tensors(self) -> list[Tensor]:
        return self._tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def as_dict(self) -> dict[str, np.ndarray]:
        return {t.name(): t.as_numpy() for t in self._tensors}


@dataclass
class Sent:
    response: InferenceResponse | None
    flags: int

    @property
    def final(self) -> bool:
        return bool(self.flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    @property
    def error(self) -> TritonError | None:
        return self.response.error() if self.response is not None else None


class SenderClosedError(RuntimeError):
    pass


@dataclass
class ResponseSender:
    """Records every send; `cancel()` flips is_cancelled(); `event` is set on FINAL."""

    sent: list[Sent] = field(default_factory=list)
    cancelled: bool = False
    fail_sends: bool = False  # simulate a client that went away
    after_final: int = 0  # sends attempted after FINAL (a protocol violation; must stay 0)
    event: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        with self._lock:
            if self.finals:
                self.after_final += 1
                raise SenderClosedError("Unable to send response. Response sender has been closed.")
            if self.fail_sends:
                raise RuntimeError("client went away")
            self.sent.append(Sent(response, flags))
            if flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL:
                self.event.set()

    def is_cancelled(self) -> bool:
        return self.cancelled

    def cancel(self) -> None:
        self.cancelled = True

    # --- assertions helpers -------------------------------------------------------------------

    @property
    def finals(self) -> int:
        return sum(1 for s in self.sent if s.final)

    @property
    def errors(self) -> list[TritonError]:
        return [s.error for s in self.sent if s.error is not None]

    @property
    def chunks(self) -> list[dict[str, np.ndarray]]:
        return [s.response.as_dict() for s in self.sent if s.response is not None and s.error is None]

    def wait_final(self, timeout: float = 5.0) -> bool:
        return self.event.wait(timeout)


class InferenceRequest:
    def __init__(
        self,
        inputs: list[Tensor] | dict[str, np.ndarray],
        request_id: str = "",
        model_name: str = "",
        requested_output_names: list[str] | None = None,
        parameters: dict[str, Any] | None = None,
    ) -> None:
        if isinstance(inputs, dict):
            inputs = [Tensor(k, v) for k, v in inputs.items()]
        self._inputs = inputs
        self._request_id = request_id
        self.model_name = model_name
        self._requested = requested_output_names or []
        self._parameters = parameters or {}
        self.sender = ResponseSender()

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def request_id(self) -> str:
        return self._request_id

    def requested_output_names(self) -> list[str]:
        return self._requested

    def parameters(self) -> str:
        return json.dumps(self._parameters)

    def get_response_sender(self) -> ResponseSender:
        return self.sender

    def is_cancelled(self) -> bool:
        return self.sender.cancelled


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    for t in inference_request.inputs():
        if t.name() == name:
            return t
    return None


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    for t in inference_response.output_tensors():
        if t.name() == name:
            return t
    return None


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    for t in model_config.get("input", []):
        if t["name"] == name:
            return t
    return None


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    for t in model_config.get("output", []):
        if t["name"] == name:
            return t
    return None


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


class Logger:
    """pb_utils.Logger: static log methods; the fake keeps (level, message) in `records`."""

    records: list[tuple[str, str]] = []
    _lock = threading.Lock()

    @classmethod
    def _log(cls, level: str, msg: str) -> None:
        with cls._lock:
            cls.records.append((level, str(msg)))

    @classmethod
    def log(cls, msg: str, level: int = 0) -> None:
        cls._log(str(level), msg)

    @classmethod
    def log_info(cls, msg: str) -> None:
        cls._log("INFO", msg)

    @classmethod
    def log_warn(cls, msg: str) -> None:
        cls._log("WARN", msg)

    @classmethod
    def log_error(cls, msg: str) -> None:
        cls._log("ERROR", msg)

    @classmethod
    def log_verbose(cls, msg: str) -> None:
        cls._log("VERBOSE", msg)

    @classmethod
    def clear(cls) -> None:
        with cls._lock:
            cls.records.clear()


# --- custom metrics (python backend r24.10 = Triton 2.51) -------------------------------------------
# Behaviour copied from probes of the real server (ttscore/backend/triton_metrics.py docstring): a failing
# server-side operation raises TritonModelException once; a SECOND one, or buckets that are not
# strictly increasing, abort the real tritonserver. The fake raises ServerAborted for those: a
# BaseException, so no `except Exception` in model code can hide it from the test.


class TritonModelException(Exception):
    pass


class ServerAborted(BaseException):
    """What would have killed the real tritonserver (boost::interprocess::lock_exception)."""


def _server_error(message: str) -> TritonModelException:
    """A failure reported by the server process: survivable once per stub, fatal the second time."""
    MetricFamily.server_errors.append(message)
    if len(MetricFamily.server_errors) > 1:
        raise ServerAborted(f"second failed metric operation ({message}): tritonserver 2.51 aborts here")
    return TritonModelException(message)


class Metric:
    def __init__(self, family: MetricFamily, labels: dict[str, str], buckets: list[float] | None) -> None:
        self.family = family
        self.labels = dict(labels)
        self.buckets = buckets
        self.value_: float = 0.0
        self.observations: list[float] = []
        self.operations = 0  # every IPC round trip this metric made (creation excluded)

    def _check(self, op: str, allowed: tuple[int, ...]) -> None:
        self.operations += 1
        if self.family.kind not in allowed:
            raise _server_error(f"TRITONSERVER_METRIC_KIND_{self.family.kind_name} does not support {op}")

    def increment(self, value: float) -> None:
        self._check("Increment", (MetricFamily.COUNTER, MetricFamily.GAUGE))
        if self.family.kind == MetricFamily.COUNTER and value < 0:
            raise _server_error(
                "TRITONSERVER_METRIC_KIND_COUNTER can only be incremented monotonically by non-negative values."
            )
        self.value_ += float(value)

    def set(self, value: float) -> None:
        self._check("Set", (MetricFamily.GAUGE,))
        self.value_ = float(value)

    def observe(self, value: float) -> None:
        self._check("Observe", (MetricFamily.HISTOGRAM,))
        self.observations.append(float(value))

    def value(self) -> float:
        self._check("Value", (MetricFamily.COUNTER, MetricFamily.GAUGE))
        return self.value_


class MetricFamily:
    COUNTER = 0
    GAUGE = 1
    HISTOGRAM = 2
    _KIND_NAMES = {0: "COUNTER", 1: "GAUGE", 2: "HISTOGRAM"}

    # Server-wide state, like the real metrics registry: (name) -> kind, (name, labels) -> Metric.
    kinds: dict[str, int] = {}
    metrics: dict[tuple[str, str], Metric] = {}
    server_errors: list[str] = []

    def __init__(self, name: str, description: str, kind: int) -> None:
        if kind not in self._KIND_NAMES:
            raise TypeError(f"incompatible kind {kind!r}")
        if MetricFamily.kinds.get(name, kind) != kind:
            raise _server_error(
                "Error when creating MetricFamily: Failed to process the request for model 'fake', "
                "message: Family name already exists with different type"
            )
        MetricFamily.kinds[name] = kind
        self.name = name
        self.description = description
        self.kind = kind

    @property
    def kind_name(self) -> str:
        return self._KIND_NAMES[self.kind]

    def Metric(self, labels: dict[str, str] | None = None, buckets: list[float] | None = None) -> Metric:
        if labels is not None and not isinstance(labels, dict):
            raise TritonModelException("Failed to create metric. Labels must be a dictionary.")
        if buckets is not None:
            if not isinstance(buckets, list):
                raise TritonModelException("Failed to create metric. Buckets must be a list.")
            if self.kind != MetricFamily.HISTOGRAM:
                raise TritonModelException("Failed to create metric. Unexpected buckets found.")
            if any(b >= c for b, c in itertools.pairwise(buckets)):
                raise ServerAborted(f"unsorted histogram buckets {buckets}: tritonserver 2.51 aborts here")
        elif self.kind == MetricFamily.HISTOGRAM:
            raise TritonModelException("Failed to create metric. Missing required buckets.")
        key = (self.name, json.dumps(labels or {}, sort_keys=True))
        # Same name and labels = the same server-side metric (it outlives a killed stub).
        metric = MetricFamily.metrics.get(key)
        if metric is None:
            metric = MetricFamily.metrics[key] = Metric(self, labels or {}, buckets)
        return metric

    # --- assertion helpers --------------------------------------------------------------------------

    @classmethod
    def find(cls, name: str, **labels: str) -> list[Metric]:
        """Every metric of family `name` whose labels include `labels`."""
        return [m for (n, _), m in cls.metrics.items() if n == name and labels.items() <= m.labels.items()]

    @classmethod
    def get(cls, name: str, **labels: str) -> Metric:
        found = cls.find(name, **labels)
        assert len(found) == 1, f"{len(found)} metrics {name}{labels}"
        return found[0]

    @classmethod
    def clear(cls) -> None:
        cls.kinds.clear()
        cls.metrics.clear()
        cls.server_errors.clear()
