"""The streaming-text WebSocket session (/v1/audio/speech/stream).

`session` is the protocol state machine, `transport` the frames and the concurrent reading of them,
`messages` the client messages and an accepted config, `audio` one TTS request's audio in either
generation mode (a sentence at a time, or one incremental generation per utterance).

Spec, "Streaming Text Input (WebSocket)". Transport-agnostic (a `Transport` of text/binary frames),
so it is tested without a server; routers.py adapts Starlette's WebSocket to it.

Obligations:
- `session.config` first (text before it is a non-fatal error); it is sticky, and may be replaced
  between utterances only: one sent while an utterance is open (text received since the last
  `input.done`) is rejected, so no input is dropped and no utterance mixes two voices. A rejected
  config leaves the previous one in force. The config is validated when it arrives (the same
  planning as POST /v1/audio/speech), and an inline `ref_audio` is fetched and turned into features
  once, then reused for every request of the session.
- `input.text` feeds the splitter (gateway.text_split); each completed unit is one TTS request.
  `input.done` flushes the rest, then `session.done`; the connection stays open.
- Per request: `audio.start`, binary frames (one payload, or PCM/WAV chunks as decoded with
  `stream_audio`), `audio.done` (total_bytes, error): always paired, also when generation fails
  (then an `error` message comes in between). `utterance_index` counts flushes, `sentence_index` the
  requests inside one.
- Word timestamps (`word_timestamps: true` in session.config; the deployment's aligner): after each sentence's
  audio frames and before its `audio.done`, vLLM-Omni's trailing `audio.chunk` with `audio_b64: ""` and the
  sentence's words in `timestamps` (gateway.protocol.AudioTimestamps): times from the utterance's first audio,
  char offsets into the sentence's text. Per chunk (the gateway's `word_timestamps_chunk_s`,
  gateway.word_timing.ChunkRule) more such messages come between a sentence's frames, each with the words that
  became final, after the frames they were aligned on. Incremental mode stays incremental: its one generation's
  words are aligned against the text it took so far (the utterance's input.text texts joined, which their char
  offsets index): per chunk as above, and the rest after its last frame.
- Barge-in: `input.cancel` stops the current utterance at once. The reader sees it as it arrives
  (even while a request is being generated or the queue is full): the request in flight is
  cancelled (its task, hence its Triton request, whose slot is freed), its `audio.done` says
  `"cancelled": true` and no frame of it follows; every `input.text` / `input.done` sent before the
  cancel and not yet spoken is dropped, as is the splitter's buffer; then `session.done` with
  `"cancelled": true` closes the utterance (counted like a flush). The config stays in force.
  A cancelled request is counted with status 499 and in tts_cancelled_requests (gateway.metrics).
- Incremental text (`split_granularity: "incremental"`, for models that take text while they
  generate: gateway.family.takes_open_text; others fall back to `sentence`): the reply to such a
  config is `session.configured` naming the mode in effect. The first `input.text` of an utterance
  starts ONE generation (its `audio.start` carries that first text), sent to Triton with a text key
  (ttscore.contract.tensors.TEXT_KEY_PARAMETER, a random hex per generation); each later
  `input.text` is sent to the same model instance as an extension (`SpeechService.extend_text`,
  one at a time, in order) while the audio streams; `input.done` ends the text and waits for the
  audio to finish (`audio.done`, `session.done` with total_sentences 1). The generation runs as
  its own task so the session keeps reading messages; `input.cancel` stops it like any request.
  The Qwen3-TTS prompt is built in its streaming mode (non_streaming_mode false).
- Metrics: tts_ws_first_text_to_audio_seconds{split_granularity} (gateway.metrics), per utterance,
  from the arrival of its first input.text to its first audio frame sent.
- Errors in messages (not JSON, unknown type, bad fields, too large) are non-fatal `error`
  messages. The idle timeout (no message while the server waits for one, also between utterances)
  sends an `error` and closes the connection.
- Messages are read concurrently with synthesis (bounded queue, so a flooding client is slowed by
  TCP backpressure); they are handled in order. A client that disconnects mid-request cancels it,
  which cancels the Triton request.
- Drain (gateway.drain, `stop`): an idle session closes with 1001 (going away) after an `error`
  saying why; one with an utterance open finishes it (up to its `session.done`) first.
- Over several Triton endpoints (gateway.pool) the sentences of one utterance run on one endpoint
  (the one its first sentence went to, while it serves); the next utterance is balanced anew.
- Metrics: each TTS request is counted like a REST request of the route (gateway.metrics), timed
  from the arrival of the message that completed its text, with the status REST would have given
  (499: the client went away).
"""
