"""The Speech API contract (../shared/spec/speech_api.md) as pydantic models.

Requests are strict (no coercion: "1.5" is not a number, 1 is not a boolean) and reject unknown
fields, so every type error is a 400 naming the field and the OpenAPI schema states exactly what
is accepted. Ranges that do not depend on the served checkpoint are in the schema too (a knob's
range is the widest of the model families' rules, ttscore.contract.families); the rules that do
(each family's own ranges, voices, languages, task routing, format-specific sample rates) are
applied by the family's gateway adapter (gateway.planning, gateway.families), which also owns the
defaults.
"""

from __future__ import annotations

import base64
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ttscore.contract import families

from . import encoding
from .settings import DEFAULT_MAX_INPUT_CHARS, DEFAULT_SEGMENT_CHARS
from .speech_fields import SpeechFields
from .word_timing import as_wire

ResponseFormat = Literal["wav", "mp3", "flac", "pcm", "opus", "aac", "ulaw", "alaw"]
TaskType = Literal["CustomVoice", "VoiceDesign", "Base"]
StreamFormat = Literal["sse", "audio"]
BATCH_MAX_ITEMS = 32

_STRICT = ConfigDict(strict=True, extra="forbid")


_INT_FIELDS = ("sample_rate", "max_new_tokens", "initial_codec_chunk_frames", "seed")
# The schema's ranges: the widest any family takes (each family's own are checked when planning).
_MAX_NEW_TOKENS = families.field_range("max_new_tokens")
_CHUNK_FRAMES = families.field_range("initial_codec_chunk_frames")
_SEED = families.field_range("seed")


def _per_family(describe: Any) -> str:
    """`describe(rules)` of every family it says something for, as "x (Family), y (Other)"."""
    said = [(describe(r), r.name) for r in families.RULES.values()]
    return ", ".join(f"{text} ({name})" for text, name in said if text is not None)


_DEFAULT_VOICES = _per_family(lambda r: r.default_voice) or "the model's own voice"
_DEFAULT_MAX_NEW_TOKENS = _per_family(
    lambda r: r.field("max_new_tokens").default if r.has_field("max_new_tokens") else None)


class VoiceId(BaseModel):
    """OpenAI's custom-voice object form of `voice`: {"id": "name"}."""

    model_config = _STRICT
    id: str


def _voice_name(value: Any) -> Any:
    return value.id if isinstance(value, VoiceId) else value


class _GenerationFields(BaseModel):
    """Fields shared by the single request, the batch defaults and batch items."""

    model_config = _STRICT

    voice: str | VoiceId | None = Field(
        None, description="Speaker name (a checkpoint's built-in speakers, GET /v1/audio/voices; or an uploaded "
        f"voice). Default: {_DEFAULT_VOICES}. Ignored by VoiceDesign and by Base with "
        "ref_audio.")
    instructions: str | None = Field(None, description="Voice style/emotion instructions (VoiceDesign: the voice description).")
    speed: float | None = Field(None, ge=0.25, le=4.0, description="Playback speed, pitch kept (non-streaming only). Default 1.0.")
    task_type: TaskType | None = Field(None, description="CustomVoice, VoiceDesign or Base; inferred when omitted.")
    sample_rate: int | None = Field(
        None, ge=encoding.MIN_RATE, le=encoding.MAX_RATE,
        description="Output sample rate (default: the model's, see GET /v1/models). mp3/aac: 8000, 11025, 12000, 16000, 22050, "
        "24000, 32000, 44100, 48000; opus: 8000, 12000, 16000, 24000, 48000; ulaw/alaw: 8000 (their default); "
        "wav/pcm/flac: any in range.")
    language: str | None = Field(None, description="Language name or Auto (default Auto); see the checkpoint's list.")
    max_new_tokens: int | None = Field(
        None, ge=_MAX_NEW_TOKENS[0], le=_MAX_NEW_TOKENS[1],
        description=f"Frame budget of the generation (the model's frames). Default: {_DEFAULT_MAX_NEW_TOKENS}; "
        "otherwise the model's own length cap.")
    initial_codec_chunk_frames: int | None = Field(
        None, ge=_CHUNK_FRAMES[0], le=_CHUNK_FRAMES[1],
        description="Frames in the first streamed chunk (time to first audio).")
    non_streaming_mode: bool | None = Field(
        None, description="Prompt construction mode, for the models that take it (not HTTP streaming). "
        "Default: Base false, others true.")
    seed: int | None = Field(None, ge=_SEED[0], le=_SEED[1], description="Makes sampling reproducible.")
    ref_audio: str | None = Field(None, description="Reference audio for Base voice cloning: a base64 data URL.")
    ref_text: str | None = Field(None, description="Transcript of the reference audio (in-context cloning).")
    x_vector_only_mode: bool | None = Field(None, description="Clone from the speaker embedding only (no ref_text).")
    word_timestamps: bool | None = Field(
        None, description="Word timestamps from the deployment's forced aligner (`triton-tts serve --aligner CKPT`; "
        "400 without one, and for a family that does not take it): each word's start/end in seconds on the output timeline and its "
        "character offsets in `input`. Whole file: a JSON body (audio in base64 + `timestamps`); SSE: "
        "speech.audio.timestamps events after each sentence's audio; WebSocket: audio.timestamps messages.")
    extra_params: dict[str, Any] | None = Field(
        None, description="A family's own generation knobs by name: "
        f"{_per_family(lambda r: ', '.join(r.knob_names) or None) or 'none'}. Any other key: 400.")

    @model_validator(mode="before")
    @classmethod
    def _integral_floats(cls, data: Any) -> Any:
        # JSON Schema counts 2.0 as an integer, strict pydantic would not; strings stay rejected.
        if isinstance(data, dict):
            fixed = {k: int(data[k]) for k in _INT_FIELDS if isinstance(data.get(k), float) and data[k].is_integer()}
            if fixed:
                return {**data, **fixed}
        return data

    @field_validator("voice", mode="after")
    @classmethod
    def _voice(cls, value: Any) -> Any:
        return _voice_name(value)


class SpeechRequest(_GenerationFields):
    """POST /v1/audio/speech"""

    input: str = Field(..., description=(
        f"Text to synthesize: at most {DEFAULT_MAX_INPUT_CHARS} characters by default (max_input_chars); one "
        f"longer than {DEFAULT_SEGMENT_CHARS} (segment_chars) is split at sentence boundaries and spoken as "
        "consecutive segments in one audio stream."))
    model: str | None = Field(None, description="A served model id (GET /v1/models); default: routed by task.")
    response_format: ResponseFormat | None = Field(
        "wav", description="Audio format. ulaw / alaw: G.711 at 8 kHz (a whole file is a WAV with the G.711 format "
        "tag; streamed, the headerless bytes). Streaming: pcm, wav, ulaw or alaw only.")
    stream: bool | None = Field(False, description="Stream speech.audio.* SSE events (pcm/wav/ulaw/alaw, speed 1.0).")
    stream_format: StreamFormat | None = Field(
        None, description="'audio': raw pcm/wav/ulaw/alaw bytes as decoded; 'sse': speech.audio.* events. "
        "Omitted: stream=true selects sse.")

    def to_fields(self) -> SpeechFields:
        return SpeechFields.from_mapping(self.model_dump())


class BatchSpeechItem(_GenerationFields):
    input: str = Field(..., description="Text to synthesize.")
    response_format: ResponseFormat | None = None


class BatchSpeechRequest(_GenerationFields):
    """POST /v1/audio/speech/batch: batch-level fields are defaults, per-item values override them."""

    items: list[BatchSpeechItem] = Field(..., min_length=1, max_length=BATCH_MAX_ITEMS)
    model: str | None = None
    response_format: ResponseFormat | None = Field("wav")

    def item_fields(self, item: BatchSpeechItem) -> SpeechFields:
        """An item's fields over the batch-level defaults (an item's explicit value wins, None
        inherits); every item goes to the batch's `model`."""
        merged: dict[str, Any] = {"input": item.input, "model": self.model}
        for name in (*_GenerationFields.model_fields, "response_format"):
            value = getattr(item, name)
            merged[name] = getattr(self, name) if value is None else value
        return SpeechFields.from_mapping(merged)


# --- responses ---------------------------------------------------------------------------------


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: int


class ErrorResponse(BaseModel):
    error: ErrorDetail


class InputTokenDetails(BaseModel):
    text_tokens: int = 0
    audio_tokens: int = 0


class SpeechUsage(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    input_token_details: InputTokenDetails = Field(default_factory=InputTokenDetails)


class SpeechAudioDelta(BaseModel):
    type: Literal["speech.audio.delta"] = "speech.audio.delta"
    audio: str
    response_format: str


# Why a generation ended (ttscore.contract.tensors.FINISH_REASONS): "stop" the model ended it, "length" its frame
# budget did (max_new_tokens or the runaway guard), "cancelled" the client did, "error" it failed.
FinishReason = Literal["stop", "length", "cancelled", "error"]


class SpeechAudioDone(BaseModel):
    type: Literal["speech.audio.done"] = "speech.audio.done"
    usage: SpeechUsage
    finish_reason: FinishReason = "stop"


class SpeechAudioTimestamps(BaseModel):
    type: Literal["speech.audio.timestamps"] = "speech.audio.timestamps"
    timestamps: list[WordTimestamp]


class SpeechAudioError(BaseModel):
    type: Literal["speech.audio.error"] = "speech.audio.error"
    error: ErrorDetail


class WordTimestamp(BaseModel):
    """One word (gateway.word_timing): seconds on the output timeline (and vLLM-Omni's milliseconds of the same
    times), and its characters `input[char_start:char_end]` (code points), trailing punctuation included."""

    word: str
    start: float
    end: float
    start_ms: int
    end_ms: int
    char_start: int
    char_end: int


class CaptionedSpeech(BaseModel):
    """POST /v1/audio/speech with word_timestamps (not streamed): the whole file and its words."""

    audio: str = Field(description="The audio file in `response_format`, base64.")
    response_format: str
    media_type: str
    timestamps: list[WordTimestamp]
    usage: SpeechUsage

    @classmethod
    def of(cls, clip: Any, response_format: str) -> CaptionedSpeech:
        """`clip`: a gateway.services.Clip with words."""
        return cls(audio=base64.b64encode(clip.audio).decode("ascii"), response_format=response_format,
                   media_type=clip.media_type, timestamps=[WordTimestamp(**w) for w in as_wire(clip.words or ())],
                   usage=SpeechUsage(**clip.usage.as_dict()))


class BatchItemResult(BaseModel):
    index: int
    status: Literal["success", "error"]
    audio_data: str | None = None
    media_type: str | None = None
    usage: SpeechUsage | None = None
    timestamps: list[WordTimestamp] | None = None  # word_timestamps
    error: str | None = None
    finish_reason: FinishReason | None = None


class BatchSpeechResponse(BaseModel):
    id: str
    results: list[BatchItemResult]
    total: int
    succeeded: int
    failed: int


class UploadedVoice(BaseModel):
    name: str
    consent: str | None = None
    created_at: int | None = None
    file_size: int | None = None
    mime_type: str | None = None
    ref_text: str | None = None
    speaker_description: str | None = None


class VoicesResponse(BaseModel):
    voices: list[str]
    uploaded_voices: list[UploadedVoice] = Field(default_factory=list)
    voice_aliases: dict[str, str] | None = Field(
        None, description="OpenAI voice names accepted in `voice` -> the preset speaker each speaks with.")


class AdapterCard(BaseModel):
    """A startup LoRA adapter merged into a served model's weights when it was exported."""

    name: str = Field(description="The adapter directory's name.")
    format: str | None = None
    sha256: str = Field(description="Identity of the adapter's files (lora config and weights).")
    r: int | None = None
    alpha: float | None = None


ADAPTER_FIELDS = tuple(AdapterCard.model_fields)


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "triton-tts"
    family: str = Field(description=f"The model family ({', '.join(families.RULES)}): which request fields it takes.")
    task_type: TaskType
    voices: list[str] = Field(default_factory=list)
    languages: list[str] = Field(default_factory=list)
    sample_rate: int
    alias_of: str | None = Field(None, description="An alias (e.g. OpenAI's tts-1): the served model it names.")
    routed_by_task: bool | None = Field(
        None, description="An alias that behaves like an omitted `model`: routed by task and voice (cloned "
        "voices to the Base model), to alias_of for preset voices.")
    adapter: AdapterCard | None = Field(
        None, description="The startup LoRA adapter merged into this model (`--lora` at export); absent: none.")


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class Liveness(BaseModel):
    status: Literal["ok"] = "ok"


class EndpointStatus(BaseModel):
    serving: bool  # takes new requests (reachable, ready, no model held broken there)
    reason: str | None = None  # why not
    outstanding: int = 0  # requests in flight on it


class ModelAdmission(BaseModel):
    running: int
    queued: int
    refused: int


class AdmissionStatus(BaseModel):
    running: int
    queued: int
    refused: int
    limits: dict[str, bool | int | float]
    models: dict[str, ModelAdmission]


class Readiness(BaseModel):
    status: Literal["ready", "not_ready", "draining"]  # draining: shutting down after SIGTERM
    triton: bool
    models: dict[str, bool]
    # Models the health monitor found failed (stub dead, reload in progress...) -> why.
    broken: dict[str, str] = {}
    # Triton endpoint (address:port) -> in service or not, and why (gateway.pool).
    endpoints: dict[str, EndpointStatus] = {}
    # Admission control (gateway.admission): generations running, queued and refused, in all and per model,
    # and the limits in force. A full queue does not make the gateway unready: it refuses fast instead.
    admission: AdmissionStatus | None = None


# --- voices --------------------------------------------------------------------------------------


class VoiceUploadResponse(BaseModel):
    """POST /v1/audio/voices"""

    success: Literal[True] = True
    voice: UploadedVoice


class VoiceDeleteResponse(BaseModel):
    """DELETE /v1/audio/voices/{name}"""

    success: Literal[True] = True
    message: str


class VoiceNotFoundResponse(BaseModel):
    """DELETE /v1/audio/voices/{name} of a voice that is not uploaded (404)."""

    success: Literal[False] = False
    error: str


VOICE_UPLOAD_FORM: dict[str, Any] = {
    "type": "object",
    "required": ["audio_sample", "consent", "name"],
    "properties": {
        "audio_sample": {"type": "string", "format": "binary",
                         "description": "Audio file (max 10 MB): wav, mp3, flac, ogg, aac, webm, mp4."},
        "consent": {"type": "string", "description": "Consent recording ID."},
        "name": {"type": "string", "description": "Name for the new voice (no path separators or control characters)."},
        "ref_text": {"type": "string", "description": "Transcript of the audio: enables in-context cloning."},
        "speaker_description": {"type": "string", "description": "Free-form description, listed by GET."},
    },
    "additionalProperties": False,
}


# --- WebSocket /v1/audio/speech/stream -------------------------------------------------------------

SplitGranularity = Literal["none", "sentence", "clause", "incremental"]


class SessionConfig(_GenerationFields):
    """{"type": "session.config", ...}: every speech parameter (but `input` and the HTTP streaming
    switches), plus how audio is framed (`stream_audio`) and how text is split (`split_granularity`).
    Sticky for the connection; may be replaced between utterances."""

    type: Literal["session.config"]
    model: str | None = None
    response_format: ResponseFormat | None = Field(
        None, description="Default wav (one payload per request); pcm when stream_audio is true.")
    stream_audio: bool = Field(False, description="Stream one or more chunks per request (pcm, wav, ulaw or alaw).")
    split_granularity: SplitGranularity = Field(
        "none", description="none: one request per input.done; sentence / clause: one per detected unit; "
        "incremental: the first input.text starts one generation and later ones extend its text while it runs "
        "(models that take text mid-generation; others fall back to sentence, said by session.configured).")

    def speech_fields(self, text: str) -> SpeechFields:
        data = self.model_dump(exclude={"type", "stream_audio", "split_granularity"})
        if self.stream_audio:
            data["stream_format"] = "audio"
            data["response_format"] = self.response_format or "pcm"
        return SpeechFields.from_mapping({**data, "input": text})


class InputText(BaseModel):
    model_config = _STRICT
    type: Literal["input.text"]
    text: str


class InputDone(BaseModel):
    model_config = _STRICT
    type: Literal["input.done"]


class InputCancel(BaseModel):
    """Barge-in: stop the current utterance now (its request in flight cancelled, the text sent
    before this message and not yet spoken dropped); the session stays, with its config."""

    model_config = _STRICT
    type: Literal["input.cancel"]


class SessionClose(BaseModel):
    model_config = _STRICT
    type: Literal["session.close"]


CLIENT_MESSAGES: dict[str, type[BaseModel]] = {
    "session.config": SessionConfig,
    "input.text": InputText,
    "input.done": InputDone,
    "input.cancel": InputCancel,
    "session.close": SessionClose,
}


class AudioStart(BaseModel):
    type: Literal["audio.start"] = "audio.start"
    utterance_index: int
    sentence_index: int
    sentence_text: str
    format: str
    sample_rate: int


class AudioDone(BaseModel):
    type: Literal["audio.done"] = "audio.done"
    utterance_index: int
    sentence_index: int
    total_bytes: int
    error: bool = False
    cancelled: bool | None = None  # True: stopped by input.cancel (absent otherwise)
    finish_reason: FinishReason = "stop"


class AudioTimestamps(BaseModel):
    """word_timestamps: the words of one sentence, after its audio frames and before its audio.done, in
    vLLM-Omni's trailing empty-audio `audio.chunk` (its `timestamps`; audio itself stays in binary frames here);
    per chunk (gateway.word_timing.ChunkRule) also between its frames, each with the words that became final.
    Times are seconds (and ms) from the utterance's first audio: the sentences before this one included; char
    offsets index this sentence's `sentence_text` (audio.start), or in incremental mode the utterance's
    input.text texts joined."""

    type: Literal["audio.chunk"] = "audio.chunk"
    utterance_index: int
    sentence_index: int
    audio_b64: str = ""
    timestamps: list[WordTimestamp]


class SessionConfigured(BaseModel):
    """Sent after a session.config asking for split_granularity "incremental": the mode in effect
    ("incremental", or "sentence" where the model cannot take text while it generates)."""

    type: Literal["session.configured"] = "session.configured"
    split_granularity: str
    reason: str | None = None  # why incremental is not in effect


class SessionDone(BaseModel):
    type: Literal["session.done"] = "session.done"
    utterance_index: int
    total_sentences: int
    cancelled: bool | None = None  # True: the utterance ended by input.cancel (absent otherwise)


class StreamError(BaseModel):
    type: Literal["error"] = "error"
    message: str
