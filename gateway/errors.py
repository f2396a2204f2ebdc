"""Typed API errors and their one wire format: `{"error": {"message", "type", "param", "code"}}`.

Everything that fails a request becomes an `APIError` (or is mapped to one here); `app.py`
renders it with `error_body`, the only place the body is built. Pure: no FastAPI imports.

Status rules (the OpenAI SDK retries 408/409/429/5xx, so deterministic failures are 4xx):
- 400 every invalid parameter, `param` naming the field where one is to blame;
- 401 (+ WWW-Authenticate: Bearer) a missing or wrong API key, in OpenAI's own body
  (`type` "invalid_request_error", `code` "invalid_api_key"; `AuthenticationError`).
- 404 an unknown model; 429 (+ Retry-After) an API key over its concurrency limit (gateway.admission);
  503 (+ Retry-After) while Triton or a model is not ready / the queue is full (gateway.admission, or
  Triton's own) / the server drains before it exits / a model failed under the request; 504 when the request
  ran out of time (`request_timeout_s`, `stall_timeout_s`); 500 a bug, with a generic message that carries the
  request id.
- DELETE /v1/audio/voices/{name} of an unknown voice: 404 with the spec's own body
  `{"success": false, "error": "Voice 'x' not found"}` (`VoiceNotFoundError`).
- WebSocket /v1/audio/speech/stream: errors travel in-band as `{"type": "error", "message": ...}`
  (`ws_error`), never as an HTTP status. A connection refused before the session starts (API key,
  drain) gets that message and then a close code (`ws_close_code`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ttscore.contract.errors import InvalidRequest


@dataclass(eq=False)  # identity hash: exceptions end up in sets (exception groups, tracebacks)
class APIError(Exception):
    message: str
    param: str | None = None
    status: int = 500
    type: str = "InternalServerError"
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        Exception.__init__(self, self.message)

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.status)


def error_body(message: str, type_: str, param: str | None, code: int | str) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def bad_request(message: str, param: str | None = None) -> APIError:
    return APIError(message, param, 400, "BadRequestError")


def not_found(message: str, param: str | None = None) -> APIError:
    return APIError(message, param, 404, "NotFoundError")


def model_not_found(model: str) -> APIError:
    return not_found(f"The model `{model}` does not exist.", "model")


def unavailable(message: str, retry_after_s: int = 5) -> APIError:
    return APIError(message, None, 503, "ServiceUnavailableError", {"Retry-After": str(int(retry_after_s))})


def overloaded(message: str, retry_after_s: int = 5) -> APIError:
    """Admission control refused the request before any work (gateway.admission): the server's limits are full."""
    return unavailable(message, retry_after_s)


def rate_limited(message: str, retry_after_s: int = 5) -> APIError:
    """Admission control refused the request for its API key's limit (gateway.admission): 429, as OpenAI's
    own rate limits (the SDK's RateLimitError; it retries after Retry-After)."""
    return APIError(message, None, 429, "RateLimitError", {"Retry-After": str(int(retry_after_s))})


def draining(retry_after_s: int = 5) -> APIError:
    """A request that arrives after SIGTERM: another instance (or this one, restarted) will take it."""
    return unavailable("The server is shutting down and takes no new requests; retry later.", retry_after_s)


class AuthenticationError(APIError):
    """401 in the body OpenAI sends for a bad key (the SDK raises openai.AuthenticationError): its
    `code` is the string "invalid_api_key", not the status. `type` here names the cause in metrics."""

    def body(self) -> dict[str, Any]:
        return error_body(self.message, "invalid_request_error", None, "invalid_api_key")


def invalid_api_key(missing: bool) -> APIError:
    """The presented key is never echoed (OpenAI shows a masked prefix; nothing at all is safer)."""
    message = ("Missing API key: send it as 'Authorization: Bearer <key>'" if missing
               else "Incorrect API key provided")
    return AuthenticationError(message, None, 401, "AuthenticationError", {"WWW-Authenticate": "Bearer"})


def gateway_timeout(message: str) -> APIError:
    """The server gave up on the request (its time limit, or Triton went silent); retryable."""
    return APIError(message, None, 504, "GatewayTimeoutError")


def internal(request_id: str | None) -> APIError:
    suffix = f" (request id: {request_id})" if request_id else ""
    return APIError(f"Internal server error{suffix}", None, 500, "InternalServerError")


def from_http_status(status: int, detail: str, headers: dict[str, str] | None = None) -> APIError:
    """Starlette's own errors (unknown route, wrong method) in the API's shape."""
    kinds = {400: "BadRequestError", 404: "NotFoundError", 405: "MethodNotAllowedError", 413: "BadRequestError",
             415: "BadRequestError"}
    return APIError(detail, None, status, kinds.get(status, "BadRequestError" if status < 500 else "InternalServerError"),
                    dict(headers or {}))


class VoiceNotFoundError(APIError):
    """DELETE of a voice that is not uploaded: the spec's 404 body, not the OpenAI error shape."""

    def body(self) -> dict[str, Any]:
        return {"success": False, "error": self.message}


def voice_not_found(message: str) -> APIError:
    return VoiceNotFoundError(message, "name", 404, "NotFoundError")


def from_invalid_request(exc: InvalidRequest) -> APIError:
    """ttscore/voices validation errors (they name the field) -> 400; VoiceNotFound (only raised by
    the voice registry's delete) -> the spec's 404."""
    if getattr(exc, "status", 400) == 404:
        return voice_not_found(exc.message)
    return bad_request(exc.message, exc.param)


def ws_error(message: str) -> dict[str, Any]:
    """The streaming-text WebSocket's (non-fatal) error message."""
    return {"type": "error", "message": message}


# RFC 6455 close codes of a refused connection: 1008 policy violation (authentication, as OpenAI's
# Realtime API does), 1013 try again later (drain, not ready), 1011 anything else.
_WS_CLOSE = {401: 1008, 403: 1008, 503: 1013}


def ws_close_code(status: int) -> int:
    return _WS_CLOSE.get(status, 1011)


def classify(exc: BaseException) -> tuple[int, str]:
    """(status, type) a client is told for `exc`: what metrics count a failure under."""
    if isinstance(exc, InvalidRequest):
        exc = from_invalid_request(exc)
    if isinstance(exc, APIError):
        return exc.status, exc.type
    return 500, "InternalServerError"


def ws_message(exc: BaseException, request_id: str | None = None) -> str:
    """What a WebSocket client is told about a failure: the API message for client errors, a
    generic one carrying the request id for anything else (the traceback stays in the log)."""
    if isinstance(exc, APIError):
        return exc.message  # a 5xx APIError's message is generic already
    if isinstance(exc, InvalidRequest):
        return exc.message
    return internal(request_id).message


# --- pydantic validation errors -> one 400 message ------------------------------------------------


_TYPE_TAGS = {"str", "int", "float", "bool", "none", "list", "dict", "bytes"}


def _is_type_tag(part: str) -> bool:
    """Union branch labels pydantic puts in `loc` ('str', 'VoiceId', 'function-after[...]')."""
    return part in _TYPE_TAGS or "[" in part or "-" in part or part[:1].isupper()


def _param(loc: tuple[Any, ...]) -> str | None:
    """('body', 'items', 2, 'speed') -> 'items[2].speed'; the body itself -> None."""
    out = ""
    for p in loc[1:] if loc and loc[0] == "body" else loc:
        if isinstance(p, int):
            out += f"[{p}]"
        elif isinstance(p, str) and not _is_type_tag(p):
            out += f".{p}" if out else p
    return out or None


def validation_error(errors: list[dict[str, Any]]) -> APIError:
    """FastAPI's RequestValidationError.errors() -> a 400 naming the first offending field."""
    if not errors:
        return bad_request("Invalid request body")
    first = errors[0]
    kind = first.get("type", "")
    if kind == "json_invalid":
        detail = (first.get("ctx") or {}).get("error", "")
        return bad_request(f"Malformed JSON in request body{': ' + str(detail) if detail else ''}")
    loc = tuple(first.get("loc", ()))
    param = _param(loc)
    if param is None:
        if isinstance(first.get("input"), (bytes, bytearray)):
            return bad_request("The request body must be JSON (Content-Type: application/json)")
        if kind in ("missing", "model_attributes_type", "dict_type", "model_type"):
            return bad_request("The request body must be a JSON object")
        return bad_request(f"Invalid request body: {first.get('msg', 'invalid value')}")
    msg = str(first.get("msg", "invalid value"))
    if kind == "missing":
        return bad_request(f"Missing required parameter: '{param}'", param)
    if kind == "extra_forbidden":
        return bad_request(f"Unrecognized request argument supplied: '{param}'", param)
    got = first.get("input")
    shown = _short(got)
    return bad_request(f"Invalid value for '{param}': {msg}" + (f" (got {shown})" if shown is not None else ""), param)


def _short(value: Any) -> str | None:
    if isinstance(value, (dict, list)):
        return None
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


# --- inference backend errors --------------------------------------------------------------------

# speech_generation / voice_features tensor names -> the API field a client must fix.
_API_PARAM = {
    "text": "input",
    "speaker": "voice",
    "audio": "ref_audio",
    "sample_rate": "ref_audio",  # only voice_features has it: the reference clip's rate
    "x_vector": "ref_audio",
    "ref_codes": "ref_audio",
    "x_vector_only": "x_vector_only_mode",
    "initial_chunk_frames": "initial_codec_chunk_frames",
}


def from_backend(code: str, message: str, param: str | None, request_id: str | None, retry_after_s: int = 5) -> APIError:
    """A Triton-side failure (ttscore.contract.tensors codes) -> the API error a client sees."""
    if code == "INVALID_ARG":
        return bad_request(message, _API_PARAM.get(param or "", param))
    if code in ("UNAVAILABLE", "CANCELLED"):
        return unavailable("The speech service is not available right now; retry later.", retry_after_s)
    if code == "DEADLINE_EXCEEDED":  # the gateway's own message (gateway.deadline), or a generic one
        return gateway_timeout(message or "The speech service did not answer in time; retry later.")
    return internal(request_id)
