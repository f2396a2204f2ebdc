"""The deployment the gateway serves: where Triton is and which checkpoints sit behind it.

`triton-tts serve` writes this as JSON (`python -m gateway --config FILE`)::

    {"triton_url": "127.0.0.1:8001",
     "models": [{"name": "Qwen3-TTS-12Hz-0.6B-CustomVoice", "variant": "custom_voice",
                 "triton_model": "speech_generation", "voice_features_model": null,
                 "artifacts_dir": "/path/to/artifacts"}],
     "readiness_models": []}

(`checkpoints` is accepted as a synonym of `models`.) `Settings` is a pydantic model (frozen, typed; the
gateway's `create_app(settings)` takes it); `Settings.load` reads the file, then the environment
(TTS_TRITON_URLS, TTS_API_KEYS), then the command line's options on top. Speakers, languages and the sample rate
are read from each checkpoint's `manifest.json` when the settings are loaded, so a bad
deployment fails at startup with one clear message, not on the first request. Pure: no
FastAPI, no Triton.

Voices and reference audio (all optional):
- `speaker_samples_dir`, `speaker_max_uploaded`, `speaker_registration_policy`,
  `speaker_max_duration_s`, `speaker_min_duration_s`: the uploaded-voice store. Unset keys fall back
  to the spec's environment variables (SPEAKER_SAMPLES_DIR, SPEAKER_MAX_UPLOADED,
  VLLM_OMNI_SPEAKER_REGISTRATION_POLICY; SPEAKER_MAX_DURATION_S, SPEAKER_MIN_DURATION_S) and then to
  the defaults (~/.cache/vllm-omni/speakers, 1000, overwrite, 30 s, 1 s).
- `speaker_cache_max_bytes` (512 MiB): the voice-features LRU.
- `speaker_sync_interval_s` (1): gateway replicas sharing one voices directory see each other's
  uploads and deletes in listings within this; a lookup by name always checks the file itself.
- `custom_voice_dir`: precomputed voices (custom_voice_manifest.json + one .safetensors per voice).
- `ref_audio`: `allowed_local_media_path` (file:// only under it; unset: file:// refused),
  `allow_private_urls` (false), `allowed_media_domains` ([] = any public host),
  `ref_audio_max_bytes` (10 MiB), `ref_audio_timeout_s` (15), `ref_audio_max_redirects` (3).
- WebSocket /v1/audio/speech/stream: `ws_idle_timeout_s` (30; also between utterances),
  `ws_max_config_bytes` (16 MiB: a session.config may carry a base64 ref_audio),
  `ws_max_text_bytes` (128 KiB: any other message).

Admission control (gateway.admission; 0 = no bound, for each):
- `max_running_per_model` (8, speech_generation's `max_active_requests` default; `triton-tts serve --max-active N`
  writes N) and `max_queued_per_model` (24: with the running, the largest batch, 32 items, fits): generations of one
  served model that run (sent to Triton) and that wait their turn in the gateway; `max_running` (64) and
  `max_queued` (64): the same for the whole deployment. A generation that finds both full is refused at once
  (503 + Retry-After).
- `queue_streams` (false): whether streams (raw audio, SSE, WebSocket utterances) wait in that queue too. Off, a
  stream that cannot run at once is refused at once (503 + Retry-After) rather than wait for a running generation to
  end, so that its client can go elsewhere; whole-file requests and batch items still queue.
- `max_queue_wait_s` (20; 0: off): a request whose estimated wait is longer is refused at once, a queued generation
  still waiting after this long is refused then (503). Batch items are exempt (they wait their turn).
- `max_concurrent_per_key` (0: off): generations (running or queued) one API key may hold; beyond: 429.
- Each can also be set by the environment: TTS_ + the key in capitals (e.g. TTS_MAX_QUEUED_PER_MODEL=8),
  which replaces the file's value.

OpenAI drop-in names (gateway.aliases; both optional, unset = the documented defaults, {} = none):
- `model_aliases`: alias -> served model id, or null (routed like an omitted `model`); default:
  tts-1, tts-1-hd, gpt-4o-mini-tts -> null.
- `voice_aliases`: voice name -> preset speaker; default: OpenAI's voice names -> Qwen3-TTS presets.

Long text (gateway.longtext):
- `max_input_chars` (100000): the longest `input` accepted (400 beyond).
- `segment_chars` (600): an input longer than this is split at sentence / clause boundaries into
  segments of at most this many characters, generated one after another as one audio stream.
- `segment_lookahead` (2): segments of one request generated at once (the one being sent and the
  next ones, buffered so that order is kept).

Triton endpoints (gateway.pool):
- `triton_url` (one "host:port") or `triton_urls` (a list of them; not both). Each host that is a
  name (not an IP address) is resolved to all its addresses every `triton_resolve_interval_s` (5;
  0: never, gRPC resolves the name itself as one endpoint), so a Kubernetes headless Service
  yields one endpoint per Triton pod. `python -m gateway --triton-url` (repeatable, or
  comma-separated) and `TTS_TRITON_URLS` (comma-separated) replace the config's list.
- `endpoint_check_interval_s` (2): how often every endpoint's readiness is checked (an endpoint out
  of service is probed back in); also the health monitor's round per endpoint.

Word timestamps (gateway.word_timing):
- `aligner_model` (null): the forced aligner's Triton model (`triton-tts serve --aligner CKPT` names it, the
  plan's `aligner_model`); unset: `word_timestamps: true` is a 400 saying how to enable it. Deployed, it is
  needed for readiness and watched by the health monitor like every model.
- `word_timestamps_chunk_s` (0): words per chunk (gateway.word_timing.ChunkRule): a running generation's audio is
  aligned after this many seconds and again each time it has doubled, and the words whose end lies
  `word_timestamps_margin_s` (0.5) before the audio so far go out at once; 0: each generation's words after its
  audio (one alignment, exactly the aligner's answer on the sentence's whole audio). Both can be set by the
  environment too (TTS_WORD_TIMESTAMPS_CHUNK_S, TTS_WORD_TIMESTAMPS_MARGIN_S; `triton-tts serve` passes its own on).

Operations (all optional):
- `api_keys`: a list of keys, any of which a request must present (gateway.auth); none: open.
  `python -m gateway` adds `TTS_API_KEYS` and `--api-key` to them. A key is printable ASCII
  without spaces or commas (TTS_API_KEYS is comma-separated).
- `drain_timeout_s` (30): after SIGTERM, how long requests in flight get to finish (gateway.drain).
- Time limits (gateway.deadline): `request_timeout_s` (600, a whole request), `stall_timeout_s`
  (30: no Triton response for this long while streaming; also bounds each plain Triton call).
- Replay (gateway.replay): `max_replays` (2): how many times one request whose Triton failed after
  audio went out is re-run elsewhere with its seed (0: never; the stream ends in-band as before).
- Faults (gateway.monitor): `health_interval_s` (2; 0 turns the monitor off),
  `health_probe_timeout_s` (5), `health_reload` (true: reload broken models through Triton's
  repository API), `health_reload_timeout_s` (300), `health_backoff_max_s` (30, between failed reloads).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from ttscore.contract import families
from ttscore.contract.errors import TTSError
from ttscore.contract.tensors import MAX_ACTIVE_REQUESTS

from .aliases import DEFAULT_MODEL_ALIASES, AliasError, parse_model_aliases, parse_voice_aliases

DEFAULT_TRITON_URL = "127.0.0.1:8001"
TRITON_URLS_ENV = "TTS_TRITON_URLS"  # comma-separated; replaces the config's triton_url(s)
API_KEYS_ENV = "TTS_API_KEYS"  # comma-separated; added to the config's api_keys
_HOST_PORT = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9_.-]+)):(?P<port>[0-9]{1,5})$")
DEFAULT_PORT = 8091
MIB = 1024 * 1024
DEFAULT_MAX_INPUT_CHARS = 100_000
# Segments stay well inside one generation: 600 characters are ~40 s of English, ~2 min of Chinese,
# within the default 2048-frame budget (164 s) either way, and short enough against timbre drift.
DEFAULT_SEGMENT_CHARS = 600
DEFAULT_SEGMENT_LOOKAHEAD = 2
_API_KEY = re.compile(r"[\x21-\x2b\x2d-\x7e]+")  # printable ASCII but space and comma

# Optional keys with their types (None = unset); see the module docstring.
_OPTIONAL_KEYS: dict[str, type | tuple[type, ...]] = {
    "speaker_samples_dir": str,
    "speaker_max_uploaded": int,
    "speaker_registration_policy": str,
    "speaker_max_duration_s": (int, float),
    "speaker_min_duration_s": (int, float),
    "speaker_cache_max_bytes": int,
    "speaker_sync_interval_s": (int, float),
    "triton_resolve_interval_s": (int, float),
    "endpoint_check_interval_s": (int, float),
    "custom_voice_dir": str,
    "allowed_local_media_path": str,
    "allow_private_urls": bool,
    "ref_audio_max_bytes": int,
    "ref_audio_timeout_s": (int, float),
    "ref_audio_max_redirects": int,
    "ws_idle_timeout_s": (int, float),
    "ws_max_config_bytes": int,
    "ws_max_text_bytes": int,
    "drain_timeout_s": (int, float),
    "request_timeout_s": (int, float),
    "stall_timeout_s": (int, float),
    "max_replays": int,
    "health_interval_s": (int, float),
    "health_probe_timeout_s": (int, float),
    "health_reload": bool,
    "health_reload_timeout_s": (int, float),
    "health_backoff_max_s": (int, float),
    "max_input_chars": int,
    "segment_chars": int,
    "segment_lookahead": int,
    "max_running_per_model": int,
    "max_queued_per_model": int,
    "max_running": int,
    "max_queued": int,
    "max_queue_wait_s": (int, float),
    "queue_streams": bool,
    "max_concurrent_per_key": int,
    "aligner_model": str,
    "word_timestamps_chunk_s": (int, float),
    "word_timestamps_margin_s": (int, float),
}
# Admission limits the environment may set (TTS_<KEY>), replacing the config file's.
ADMISSION_KEYS = ("max_running_per_model", "max_queued_per_model", "max_running", "max_queued", "max_queue_wait_s",
                  "queue_streams", "max_concurrent_per_key")
# Other numbers the environment may set the same way: words per chunk (TTS_WORD_TIMESTAMPS_CHUNK_S, ...).
ENV_KEYS = (*ADMISSION_KEYS, "word_timestamps_chunk_s", "word_timestamps_margin_s")
# ... each set by the environment variable of its name (compose, Kubernetes).
ENV_NAMES = {key: f"TTS_{key.upper()}" for key in ENV_KEYS}
ENV_BOOLEANS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


# The most items a batch request holds (`batch_max_items`'s default).
BATCH_MAX_ITEMS = 32


class SettingsError(TTSError):
    """The deployment description is unusable."""


def split_host_port(url: str) -> tuple[str, int]:
    """("host", port) of a "host:port" or "[v6 address]:port" endpoint; SettingsError naming it."""
    m = _HOST_PORT.match(url.strip()) if isinstance(url, str) else None
    if m is None or int(m.group("port")) > 65535:
        raise SettingsError(f"Triton endpoint {url!r} is not \"host:port\" (IPv6: \"[address]:port\")")
    return m.group("v6") or m.group("host"), int(m.group("port"))


def parse_url_list(raw: str) -> tuple[str, ...]:
    """A comma-separated list of endpoints (TTS_TRITON_URLS, --triton-url a,b)."""
    return tuple(u.strip() for u in raw.split(",") if u.strip())


@dataclass(frozen=True)
class CheckpointSettings:
    """One served checkpoint as the deployment describes it."""

    name: str  # the model id shown by /v1/models and accepted in `model`
    variant: str  # custom_voice | voice_design | base
    triton_model: str  # its speech_generation model in Triton
    artifacts_dir: Path
    voice_features_model: str | None = None  # Base only: the voice_features ensemble
    aliases: tuple[str, ...] = ()  # extra ids accepted in `model`

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> CheckpointSettings:
        if not isinstance(raw, Mapping):
            raise SettingsError(f"a served model must be an object, got {raw!r}")
        known = {"name", "variant", "triton_model", "artifacts_dir", "voice_features_model", "aliases"}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise SettingsError(f"unknown key(s) {', '.join(unknown)} in served model {raw.get('name')!r}")
        for key in ("name", "variant", "triton_model", "artifacts_dir"):
            if not isinstance(raw.get(key), str) or not raw[key]:
                raise SettingsError(f"served model {raw.get('name')!r}: {key!r} must be a non-empty string")
        if raw["variant"] not in families.VARIANTS:
            raise SettingsError(f"served model {raw['name']!r}: variant must be one of {', '.join(families.VARIANTS)}")
        vf = raw.get("voice_features_model")
        if vf is not None and (not isinstance(vf, str) or not vf):
            raise SettingsError(f"served model {raw['name']!r}: voice_features_model must be a string or null")
        aliases = raw.get("aliases") or ()
        if not isinstance(aliases, (list, tuple)) or not all(isinstance(a, str) and a for a in aliases):
            raise SettingsError(f"served model {raw['name']!r}: aliases must be a list of strings")
        return cls(
            name=raw["name"],
            variant=raw["variant"],
            triton_model=raw["triton_model"],
            artifacts_dir=Path(raw["artifacts_dir"]),
            voice_features_model=vf,
            aliases=tuple(aliases),
        )


class Settings(BaseModel):
    """The gateway's settings (see the module docstring); invalid ones raise SettingsError naming what is
    wrong."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    models: tuple[CheckpointSettings, ...]
    triton_url: str = DEFAULT_TRITON_URL
    # Several Triton endpoints (gateway.pool); empty: just `triton_url`.
    triton_urls: tuple[str, ...] = ()
    triton_resolve_interval_s: float = 5.0
    endpoint_check_interval_s: float = 2.0
    # Models readiness checks besides each checkpoint's own (e.g. a shared code2wav).
    readiness_models: tuple[str, ...] = ()
    # How long a "ready" answer from Triton is trusted before it is checked again.
    readiness_ttl_s: float = 2.0
    retry_after_s: int = 5
    batch_max_items: int = BATCH_MAX_ITEMS
    # Uploaded voices (None: the spec's environment variable, then its default).
    speaker_samples_dir: str | None = None
    speaker_max_uploaded: int | None = None
    speaker_registration_policy: str | None = None
    speaker_max_duration_s: float | None = None
    speaker_min_duration_s: float | None = None
    speaker_cache_max_bytes: int = 512 * MIB
    speaker_sync_interval_s: float = 1.0
    # Precomputed voices.
    custom_voice_dir: str | None = None
    # ref_audio sources (gateway.voices.sources).
    allowed_local_media_path: str | None = None
    allow_private_urls: bool = False
    allowed_media_domains: tuple[str, ...] = ()
    ref_audio_max_bytes: int = 10 * MIB
    ref_audio_timeout_s: float = 15.0
    ref_audio_max_redirects: int = 3
    # WebSocket streaming-text endpoint.
    ws_idle_timeout_s: float = 30.0
    ws_max_config_bytes: int = 16 * MIB
    ws_max_text_bytes: int = 128 * 1024
    # Operations.
    api_keys: tuple[str, ...] = ()
    drain_timeout_s: float = 30.0
    # Time limits and fault handling (gateway.deadline, gateway.monitor).
    request_timeout_s: float = 600.0
    stall_timeout_s: float = 30.0
    max_replays: int = 2
    health_interval_s: float = 2.0
    health_probe_timeout_s: float = 5.0
    health_reload: bool = True
    health_reload_timeout_s: float = 300.0
    health_backoff_max_s: float = 30.0
    # OpenAI drop-in names (None: the defaults of gateway.aliases).
    model_aliases: Mapping[str, str | None] | None = None
    voice_aliases: Mapping[str, str] | None = None
    # Long text (gateway.longtext).
    max_input_chars: int = DEFAULT_MAX_INPUT_CHARS
    segment_chars: int = DEFAULT_SEGMENT_CHARS
    segment_lookahead: int = DEFAULT_SEGMENT_LOOKAHEAD
    # Admission control (gateway.admission; 0: no bound). Measured (perf/README.md, "A burst of 200 streams" and the
    # mixed soak): a model runs its `max_active_requests` generations together; the gateway sending it more only
    # left them waiting inside Triton, unseen and without a time bound (OmniVoice streams admitted in an overload
    # waited 60 s for their first audio). Running bound = that batch; the queue holds the rest of the largest batch
    # (BATCH_MAX_ITEMS). A stream does not queue: behind 8 running it waited 2-4 s for its first audio.
    max_running_per_model: int = MAX_ACTIVE_REQUESTS
    max_queued_per_model: int = BATCH_MAX_ITEMS - MAX_ACTIVE_REQUESTS
    max_running: int = 64
    max_queued: int = 64
    max_queue_wait_s: float = 20.0
    queue_streams: bool = False
    max_concurrent_per_key: int = 0
    # Word timestamps (gateway.word_timing): the deployment's forced aligner in Triton; None: none deployed.
    aligner_model: str | None = None
    word_timestamps_chunk_s: float = 0.0
    word_timestamps_margin_s: float = 0.5

    @model_validator(mode="after")
    def _check(self) -> Settings:
        if not self.models:
            raise SettingsError("the deployment serves no model")
        for i, key in enumerate(self.api_keys):
            if not isinstance(key, str) or not _API_KEY.fullmatch(key):  # the message never shows a key
                raise SettingsError(f"API key #{i + 1} is not printable ASCII without spaces and commas")
        for key in ("drain_timeout_s", "word_timestamps_chunk_s", "word_timestamps_margin_s"):
            if not getattr(self, key) >= 0:
                raise SettingsError(f"{key} must not be negative")
        for key in ("speaker_cache_max_bytes", "ref_audio_max_bytes", "ref_audio_max_redirects", "ws_max_config_bytes",
                    "ws_max_text_bytes"):
            if getattr(self, key) < 0:
                raise SettingsError(f"{key} must not be negative")
        for key in ("ref_audio_timeout_s", "ws_idle_timeout_s", "request_timeout_s", "stall_timeout_s",
                    "health_probe_timeout_s", "health_reload_timeout_s", "health_backoff_max_s"):
            if not getattr(self, key) > 0:
                raise SettingsError(f"{key} must be positive")
        for url in self.endpoints():
            split_host_port(url)
        if len(set(self.endpoints())) != len(self.endpoints()):
            raise SettingsError("triton_urls lists an endpoint twice")
        if self.triton_resolve_interval_s < 0 or self.speaker_sync_interval_s < 0:
            raise SettingsError("triton_resolve_interval_s and speaker_sync_interval_s must not be negative")
        if not self.endpoint_check_interval_s > 0:
            raise SettingsError("endpoint_check_interval_s must be positive")
        if self.max_replays < 0:
            raise SettingsError("max_replays must not be negative (0 turns replay off)")
        for key in ADMISSION_KEYS:
            if not getattr(self, key) >= 0:
                raise SettingsError(f"{key} must not be negative (0: no bound)")
        if self.health_interval_s < 0:
            raise SettingsError("health_interval_s must not be negative (0 turns the health monitor off)")
        max_text = min(r.max_text_chars for r in families.RULES.values())
        if not 1 <= self.segment_chars <= max_text:
            raise SettingsError(f"segment_chars must be between 1 and {max_text} (what one generation takes)")
        if self.max_input_chars < 1 or self.segment_lookahead < 1:
            raise SettingsError("max_input_chars and segment_lookahead must be positive")
        ids: set[str] = set()
        for m in self.models:
            for name in (m.name, *m.aliases):
                if name in ids:
                    raise SettingsError(f"model id {name!r} is used twice")
                ids.add(name)
        for alias, target in self.effective_model_aliases().items():
            if alias in ids:
                raise SettingsError(f"model alias {alias!r} is already a served model id")
            if target is not None and target not in ids:
                raise SettingsError(f"model alias {alias!r} names {target!r}, which is not a served model id")
        if len({m.triton_model for m in self.models}) != len(self.models):
            raise SettingsError("two served models share one triton_model")
        return self

    def replace(self, **changes: Any) -> Settings:
        """These settings with `changes`, validated again."""
        return _validated({**{name: getattr(self, name) for name in type(self).model_fields}, **changes})

    def endpoints(self) -> tuple[str, ...]:
        """The Triton gRPC addresses as configured (names not resolved yet)."""
        return self.triton_urls or (self.triton_url,)

    def triton_models(self) -> list[str]:
        """Every Triton model the deployment needs: each checkpoint's, its voice_features ensemble,
        the readiness_models (a shared code2wav) and the forced aligner (word timestamps)."""
        needed = [m.triton_model for m in self.models]
        needed += [m.voice_features_model for m in self.models if m.voice_features_model]
        needed += [self.aligner_model] if self.aligner_model else []
        return list(dict.fromkeys([*needed, *self.readiness_models]))

    def effective_model_aliases(self) -> dict[str, str | None]:
        return dict(DEFAULT_MODEL_ALIASES if self.model_aliases is None else self.model_aliases)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Settings:
        if not isinstance(raw, Mapping):
            raise SettingsError("the gateway config must be a JSON object")
        known = {"triton_url", "triton_urls", "models", "checkpoints", "readiness_models", "readiness_ttl_s", "retry_after_s",
                 "batch_max_items", "allowed_media_domains", "api_keys", "model_aliases", "voice_aliases",
                 *_OPTIONAL_KEYS}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise SettingsError(f"unknown gateway config key(s): {', '.join(unknown)}")
        models_raw = raw.get("models", raw.get("checkpoints"))
        if not isinstance(models_raw, Sequence) or isinstance(models_raw, str) or not models_raw:
            raise SettingsError("the gateway config needs a non-empty 'models' list")
        extra: dict[str, Any] = {}
        if "triton_url" in raw and "triton_urls" in raw:
            raise SettingsError("give triton_url or triton_urls, not both")
        if "triton_url" in raw:
            extra["triton_url"] = str(raw["triton_url"])
        if "triton_urls" in raw:
            urls = raw["triton_urls"]
            if isinstance(urls, str) or not isinstance(urls, Sequence) or not urls \
                    or not all(isinstance(u, str) for u in urls):
                raise SettingsError("triton_urls must be a non-empty list of \"host:port\" strings")
            extra["triton_urls"] = tuple(urls)
        if "readiness_models" in raw:
            extra["readiness_models"] = tuple(str(m) for m in raw["readiness_models"] or ())
        for key in ("readiness_ttl_s", "retry_after_s", "batch_max_items"):
            if key in raw:
                extra[key] = raw[key]
        for key, kind in _OPTIONAL_KEYS.items():
            value = raw.get(key)
            if value is None:
                continue
            if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
                raise SettingsError(f"gateway config key {key!r} has the wrong type: {value!r}")
            extra[key] = value
        domains = raw.get("allowed_media_domains") or ()
        if isinstance(domains, str) or not all(isinstance(d, str) and d for d in domains):
            raise SettingsError("allowed_media_domains must be a list of host names")
        extra["allowed_media_domains"] = tuple(domains)
        keys = raw.get("api_keys") or ()
        if isinstance(keys, str) or not isinstance(keys, Sequence):
            raise SettingsError("api_keys must be a list of strings")
        extra["api_keys"] = tuple(keys)
        try:
            if raw.get("model_aliases") is not None:
                extra["model_aliases"] = parse_model_aliases(raw["model_aliases"])
            if raw.get("voice_aliases") is not None:
                extra["voice_aliases"] = parse_voice_aliases(raw["voice_aliases"])
        except AliasError as exc:
            raise SettingsError(str(exc)) from None
        return _validated({"models": tuple(CheckpointSettings.parse(m) for m in models_raw), **extra})

    @classmethod
    def from_file(cls, path: str | Path) -> Settings:
        try:
            raw = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise SettingsError(f"cannot read gateway config {path}: {exc}") from None
        return cls.from_dict(raw)

    @classmethod
    def load(cls, path: str | Path, environ: Mapping[str, str] | None = None, *, triton_urls: Iterable[str] = (),
             api_keys: Iterable[str] = (), custom_voice_dir: str | None = None,
             allowed_local_media_path: str | None = None, allow_private_urls: bool = False,
             drain_timeout_s: float | None = None) -> Settings:
        """The config file's settings, then the environment's, then the command line's (`python -m gateway`):
        endpoints (`triton_urls`, each possibly comma-separated) replace the file's and TTS_TRITON_URLS'; API
        keys add to the file's and TTS_API_KEYS'; the other options replace the file's when given."""
        environ = os.environ if environ is None else environ
        settings = cls.from_file(path)
        keys = [*settings.api_keys, *_env_list(environ, API_KEYS_ENV), *api_keys]
        urls = [u for arg in triton_urls for u in parse_url_list(arg)] or list(_env_list(environ, TRITON_URLS_ENV))
        overrides: dict[str, Any] = {
            **_env_numbers(environ),
            "triton_urls": tuple(dict.fromkeys(urls)) if urls else None,
            "custom_voice_dir": custom_voice_dir,
            "allowed_local_media_path": allowed_local_media_path,
            "allow_private_urls": True if allow_private_urls else None,
            "api_keys": tuple(dict.fromkeys(keys)) if keys else None,
            "drain_timeout_s": drain_timeout_s,
        }
        overrides = {k: v for k, v in overrides.items() if v is not None}
        return settings.replace(**overrides) if overrides else settings


def _env_numbers(environ: Mapping[str, str]) -> dict[str, Any]:
    """Admission limits and word-timestamp settings the environment sets (TTS_MAX_RUNNING_PER_MODEL, ...)."""
    out: dict[str, Any] = {}
    for key, name in ENV_NAMES.items():
        raw = environ.get(name, "").strip()
        if not raw:
            continue
        if key == "queue_streams":
            if raw.lower() not in ENV_BOOLEANS:
                raise SettingsError(f"{name} must be one of {', '.join(ENV_BOOLEANS)}, got {raw!r}")
            out[key] = ENV_BOOLEANS[raw.lower()]
            continue
        try:
            out[key] = float(raw) if key.endswith("_s") else int(raw)
        except ValueError:
            raise SettingsError(f"{name} must be a number, got {raw!r}") from None
    return out


def _env_list(environ: Mapping[str, str], name: str) -> tuple[str, ...]:
    """A comma-separated environment variable's items (blank ones left out)."""
    return parse_url_list(environ.get(name, ""))


def _validated(values: Mapping[str, Any]) -> Settings:
    """Settings from `values`; a value pydantic refuses (a wrong type) is a SettingsError naming the key."""
    try:
        return Settings.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "settings"
        raise SettingsError(f"gateway config key {where!r}: {first['msg']}") from None
