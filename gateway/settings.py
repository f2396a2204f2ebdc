"""The deployment the gateway serves: where Triton is and which checkpoints sit behind it.

`triton-tts serve` writes this as JSON (`python -m gateway --config FILE`)::

    {"triton_url": "127.0.0.1:8001",
     "models": [{"name": "Qwen3-TTS-12Hz-0.6B-CustomVoice", "variant": "custom_voice",
                 "triton_model": "speech_generation", "voice_features_model": null,
                 "artifacts_dir": "/path/to/artifacts"}],
     "readiness_models": []}

(`checkpoints` is accepted as a synonym of `models`.) Speakers, languages and the sample rate
are read from each checkpoint's `manifest.json` when the settings are loaded, so a bad
deployment fails at startup with one clear message, not on the first request. Pure: no
FastAPI, no Triton.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ttscore.errors import TTSError

VARIANTS = ("custom_voice", "voice_design", "base")
# Spec task names <-> checkpoint variants.
TASK_OF_VARIANT = {"custom_voice": "CustomVoice", "voice_design": "VoiceDesign", "base": "Base"}
VARIANT_OF_TASK = {task: variant for variant, task in TASK_OF_VARIANT.items()}

DEFAULT_TRITON_URL = "127.0.0.1:8001"
DEFAULT_PORT = 8091


class SettingsError(TTSError):
    """The deployment description is unusable."""


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
        if raw["variant"] not in VARIANTS:
            raise SettingsError(f"served model {raw['name']!r}: variant must be one of {', '.join(VARIANTS)}")
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


@dataclass(frozen=True)
class Settings:
    models: tuple[CheckpointSettings, ...]
    triton_url: str = DEFAULT_TRITON_URL
    # Models readiness checks besides each checkpoint's own (e.g. a shared code2wav).
    readiness_models: tuple[str, ...] = ()
    # How long a "ready" answer from Triton is trusted before it is checked again.
    readiness_ttl_s: float = 2.0
    retry_after_s: int = 5
    batch_max_items: int = 32

    def __post_init__(self) -> None:
        if not self.models:
            raise SettingsError("the deployment serves no model")
        ids: set[str] = set()
        for m in self.models:
            for name in (m.name, *m.aliases):
                if name in ids:
                    raise SettingsError(f"model id {name!r} is used twice")
                ids.add(name)
        if len({m.triton_model for m in self.models}) != len(self.models):
            raise SettingsError("two served models share one triton_model")

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Settings:
        if not isinstance(raw, Mapping):
            raise SettingsError("the gateway config must be a JSON object")
        known = {"triton_url", "models", "checkpoints", "readiness_models", "readiness_ttl_s", "retry_after_s",
                 "batch_max_items"}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise SettingsError(f"unknown gateway config key(s): {', '.join(unknown)}")
        models_raw = raw.get("models", raw.get("checkpoints"))
        if not isinstance(models_raw, Sequence) or isinstance(models_raw, str) or not models_raw:
            raise SettingsError("the gateway config needs a non-empty 'models' list")
        extra: dict[str, Any] = {}
        if "triton_url" in raw:
            extra["triton_url"] = str(raw["triton_url"])
        if "readiness_models" in raw:
            extra["readiness_models"] = tuple(str(m) for m in raw["readiness_models"] or ())
        for key in ("readiness_ttl_s", "retry_after_s", "batch_max_items"):
            if key in raw:
                extra[key] = raw[key]
        return cls(models=tuple(CheckpointSettings.parse(m) for m in models_raw), **extra)

    @classmethod
    def from_file(cls, path: str | Path) -> Settings:
        try:
            raw = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise SettingsError(f"cannot read gateway config {path}: {exc}") from None
        return cls.from_dict(raw)


@dataclass(frozen=True)
class ServedCheckpoint:
    """A served checkpoint with the facts the Speech API needs from its manifest."""

    settings: CheckpointSettings
    speakers: tuple[str, ...]  # lower-case built-in speaker names (CustomVoice)
    languages: tuple[str, ...]  # lower-case, "auto" included
    sample_rate: int
    samples_per_frame: int
    model_size: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.settings.name

    @property
    def variant(self) -> str:
        return self.settings.variant

    @property
    def task(self) -> str:
        return TASK_OF_VARIANT[self.settings.variant]

    @property
    def triton_model(self) -> str:
        return self.settings.triton_model

    @property
    def voice_features_model(self) -> str | None:
        return self.settings.voice_features_model

    def answers_to(self, model: str) -> bool:
        """`model` names this checkpoint: its id, an alias, or a hub-style `org/<id>`."""
        ids = (self.settings.name, *self.settings.aliases)
        return model in ids or model.rsplit("/", 1)[-1] in ids

    @classmethod
    def from_manifest(cls, settings: CheckpointSettings, manifest: Mapping[str, Any]) -> ServedCheckpoint:
        variant = manifest.get("variant")
        if variant != settings.variant:
            raise SettingsError(
                f"served model {settings.name!r} is declared {settings.variant} but its artifacts "
                f"({settings.artifacts_dir}) are {variant}"
            )
        if settings.variant == "base" and not settings.voice_features_model:
            raise SettingsError(f"Base model {settings.name!r} needs a voice_features_model")
        try:
            speakers = tuple(sorted(str(s).lower() for s in (manifest.get("speakers") or {})))
            languages = {str(x).lower() for x in manifest.get("languages") or ()} | {"auto"}
            sample_rate = int(manifest["sample_rate"])
            samples_per_frame = int(manifest["samples_per_frame"])
        except (KeyError, TypeError, ValueError) as exc:
            raise SettingsError(f"{settings.artifacts_dir}/manifest.json lacks {exc}") from None
        if settings.variant == "custom_voice" and not speakers:
            raise SettingsError(f"CustomVoice model {settings.name!r} has no speakers in its manifest")
        return cls(
            settings=settings,
            speakers=speakers,
            languages=tuple(sorted(languages)),
            sample_rate=sample_rate,
            samples_per_frame=samples_per_frame,
            model_size=str(manifest.get("model_size", "")),
        )


def load_checkpoints(settings: Settings) -> tuple[ServedCheckpoint, ...]:
    """Read every served checkpoint's manifest (fails fast with SettingsError)."""
    from ttscore.pipeline import read_manifest  # noqa: PLC0415  (numpy-only; kept out of import time)

    served = []
    for m in settings.models:
        try:
            manifest = read_manifest(m.artifacts_dir)
        except TTSError as exc:
            raise SettingsError(f"served model {m.name!r}: {exc}") from None
        served.append(ServedCheckpoint.from_manifest(m, manifest))
    return tuple(served)
