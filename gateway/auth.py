"""API keys: with any key configured, every route but the open ones needs `Authorization: Bearer <key>`.

- Keys come from `api_keys` in the config, `TTS_API_KEYS` (comma-separated) and `--api-key`
  (gateway.__main__ merges them into Settings.api_keys). No key: no authentication.
- Open without a key: liveness, readiness and metrics (probes and scrapers carry no secrets), and
  the playground page (`/` and its assets under `/static/`), which asks for the key itself.
- The WebSocket also takes the key as the `api_key` query parameter: browsers cannot set headers
  on a WebSocket handshake.
- The ElevenLabs dialect's header `xi-api-key` is a key like a Bearer token (the same keys). A dialect
  WebSocket that presents no key in its handshake may send it in its first message (`xi_api_key`): the
  middleware lets it in with the keys in the scope (`DEFERRED_KEYS`) and the session checks it.
- A presented key is compared with every configured key in constant time (hmac.compare_digest, no
  early exit), so neither a match nor its position leaks through timing. Keys are never logged.

An accepted key's identity (a digest, never the key) is in `API_KEY_ID` for the rest of the request or
WebSocket connection: admission control counts each key's generations with it (gateway.admission).

The middleware raises errors.invalid_api_key; app.RequestContextMiddleware puts it on the wire
(HTTP 401 + WWW-Authenticate: Bearer; WebSocket: an `error` message, then close 1008).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Receive, Scope, Send

from . import errors

# The identity of the API key the current request presented (None: no keys configured, or an open path).
API_KEY_ID: ContextVar[str | None] = ContextVar("gateway_api_key_id", default=None)

OPEN_PATHS = frozenset({"/", "/health", "/ready", "/metrics"})
OPEN_PREFIX = "/static/"
QUERY_PARAM = "api_key"
XI_API_KEY_HEADER = b"xi-api-key"
DEFERRED_KEYS = "gateway.auth.deferred_keys"  # scope key: the keys a session checks a message's key against


class APIKeys:
    def __init__(self, keys: Iterable[str]) -> None:
        self._keys = tuple(k.encode() for k in keys)

    def __bool__(self) -> bool:
        return bool(self._keys)

    def accepts(self, presented: str) -> bool:
        # UTF-8, never a lossy codec: no other text may encode to a key's bytes (keys are ASCII).
        candidate = presented.encode("utf-8", "surrogatepass")
        ok = False
        for key in self._keys:  # every key, whatever matched: constant time in the position of a match
            ok |= hmac.compare_digest(candidate, key)
        return ok


def bearer_token(scope: Scope) -> str | None:
    """The token of an `Authorization: Bearer <token>` header (the scheme is case-insensitive)."""
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").strip().partition(" ")
            return token.strip() if scheme.lower() == "bearer" else None
    return None


def xi_api_key(scope: Scope) -> str | None:
    """The ElevenLabs dialect's `xi-api-key` header."""
    for name, value in scope.get("headers", []):
        if name == XI_API_KEY_HEADER:
            return str(value.decode("latin-1").strip())
    return None


def query_key(scope: Scope) -> str | None:
    query = scope.get("query_string", b"").decode("latin-1")
    for name, value in parse_qsl(query, keep_blank_values=True):
        if name == QUERY_PARAM:
            return value
    return None


def _open(path: str) -> bool:
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIX)


class APIKeyMiddleware:
    def __init__(self, app: ASGIApp, keys: APIKeys, defer: Callable[[str], bool] | None = None) -> None:
        """`defer(path)`: a WebSocket on that path without a key in its handshake is let in, to present
        its key in a message (the session checks it against `scope[DEFERRED_KEYS]`)."""
        self.app = app
        self.keys = keys
        self.defer = defer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and self.keys and not _open(scope["path"]):
            presented = bearer_token(scope) or xi_api_key(scope)
            if presented is None and scope["type"] == "websocket":
                presented = query_key(scope)
            if not presented and scope["type"] == "websocket" and self.defer is not None and self.defer(scope["path"]):
                scope[DEFERRED_KEYS] = self.keys
            elif not presented or not self.keys.accepts(presented):
                raise errors.invalid_api_key(missing=not presented)
            # (a deferred key is checked by the session, after this: its requests carry no key identity)
            token = API_KEY_ID.set(key_id(presented) if presented else None)
            try:
                await self.app(scope, receive, send)
            finally:
                API_KEY_ID.reset(token)
            return
        await self.app(scope, receive, send)


def key_id(key: str) -> str:
    """A key's identity for per-key limits: a digest, so that no key is kept in memory twice or logged."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]
