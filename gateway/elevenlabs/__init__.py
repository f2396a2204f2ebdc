"""The ElevenLabs dialect: ElevenLabs' text-to-speech endpoints over the same services as the Speech API.

Voice-agent frameworks (pipecat's ElevenLabsTTSService / ElevenLabsHttpTTSService, LiveKit's plugin, the
`elevenlabs` SDK with `base_url`) speak this dialect; they run unchanged against the gateway. Nothing here
generates audio of its own: a request is planned by gateway.planning (voices, models, aliases, limits),
run by gateway.services (the same Triton streams, replay, metrics) and encoded by gateway.encoding.

- `wire`: the dialect's vocabulary (pure): output formats, request bodies and WebSocket messages, the
  error shape, the voice listing, and the character alignment built from word timestamps.
- `http`: the HTTP routes (`POST /v1/text-to-speech/{voice_id}` [`/stream`] [`/with-timestamps`],
  `GET /v1/voices`) and the WebSocket routes (`stream-input`, `multi-stream-input`).
- `session`: the WebSocket protocol state machine (one context for `stream-input`, many for
  `multi-stream-input`).

Obligations:
- Errors have ElevenLabs' shape (`{"detail": {"status", "message"}}` over HTTP, `{"message", "error",
  "code"}` in a WebSocket) and its statuses; they are built in `wire` only, and the app renders an
  APIError raised on a dialect path through `wire.dialect_error` (gateway.app: the one place errors reach
  the wire).
- Alignment (`alignment` / `normalizedAlignment`) comes from word timestamps through one function
  (`wire.char_alignment`): the words the deployment's forced aligner times (gateway.word_timing: the
  dialect's request asks for `word_timestamps`); without an aligner it is null, as ElevenLabs sends it when
  alignment is off.
"""
