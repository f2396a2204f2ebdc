"""The served checkpoints: each deployment entry with the facts the Speech API needs from its manifest.

Speakers, languages and the sample rate are read from each checkpoint's `manifest.json` when the
gateway starts (`load_checkpoints`), so a bad deployment fails at startup with one clear message,
not on the first request. Each checkpoint answers for its family's gateway adapter (`adapter`,
gateway.families) and its contract rules (`rules`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ttscore.contract import families
from ttscore.contract.errors import TTSError
from ttscore.contract.manifest import Manifest, read_manifest

from .families import adapter
from .family import FamilyAdapter
from .settings import CheckpointSettings, Settings, SettingsError


@dataclass(frozen=True)
class ServedCheckpoint:
    """A served checkpoint with the facts the Speech API needs from its manifest."""

    settings: CheckpointSettings
    speakers: tuple[str, ...]  # lower-case built-in speaker names (CustomVoice)
    languages: tuple[str, ...]  # lower-case, "auto" included; empty for a family that refuses "Auto" too
    sample_rate: int
    samples_per_frame: int
    model_size: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    speaker_embed_dim: int | None = None  # Base: the x-vector size (checks precomputed voices)
    num_code_groups: int | None = None
    family: str = next(iter(families.RULES))  # the manifest's model family (ttscore.contract.families)
    # What the family's gateway adapter read from the manifest (FamilyAdapter.manifest_facts).
    facts: dict[str, Any] = field(default_factory=dict)
    # The startup LoRA adapter merged into its weights at export (the manifest's `adapter`), or None.
    lora: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        return self.settings.name

    @property
    def variant(self) -> str:
        return self.settings.variant

    @property
    def task(self) -> str:
        return self.rules.variants[self.settings.variant]

    @property
    def rules(self) -> families.FamilyRules:
        return families.RULES[self.family]

    @property
    def adapter(self) -> FamilyAdapter:
        """The family's gateway adapter (gateway.families)."""
        return adapter(self.family)

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
    def from_manifest(cls, settings: CheckpointSettings, manifest: Manifest) -> ServedCheckpoint:
        if manifest.variant != settings.variant:
            raise SettingsError(
                f"served model {settings.name!r} is declared {settings.variant} but its artifacts "
                f"({settings.artifacts_dir}) are {manifest.variant}"
            )
        if manifest.family not in families.RULES:
            raise SettingsError(f"served model {settings.name!r}: unknown model family {manifest.family!r}")
        rules = families.RULES[manifest.family]
        if settings.variant not in rules.variants:
            raise SettingsError(f"served model {settings.name!r}: {rules.name} has no variant {settings.variant!r}")
        task = rules.variants[settings.variant]
        # A checkpoint that clones voices from reference audio computes their features on its feature model.
        if task == "Base" and adapter(manifest.family).clones_voices and not settings.voice_features_model:
            raise SettingsError(f"Base model {settings.name!r} needs a voice_features_model")
        if manifest.sample_rate is None or manifest.samples_per_frame is None:
            raise SettingsError(f"{settings.artifacts_dir}/manifest.json lacks 'sample_rate'/'samples_per_frame'")
        speakers = tuple(sorted(manifest.speakers))
        if task == "CustomVoice" and not speakers:
            raise SettingsError(f"CustomVoice model {settings.name!r} has no speakers in its manifest")
        return cls(
            settings=settings,
            speakers=speakers,
            # A family that refuses `language` outright lists none (not even "Auto": naming it is a 400).
            languages=tuple(sorted({*manifest.languages, "auto"})) if rules.auto_language else (),
            sample_rate=manifest.sample_rate,
            samples_per_frame=manifest.samples_per_frame,
            model_size=manifest.model_size,
            speaker_embed_dim=manifest.speaker_embed_dim,
            num_code_groups=manifest.num_code_groups,
            family=manifest.family,
            facts=adapter(manifest.family).manifest_facts(manifest),
            lora=dict(manifest.adapter) if manifest.adapter else None,
        )


def load_checkpoints(settings: Settings) -> tuple[ServedCheckpoint, ...]:
    """Read every served checkpoint's manifest (fails fast with SettingsError)."""
    served = []
    for m in settings.models:
        try:
            manifest = read_manifest(m.artifacts_dir)
        except TTSError as exc:
            raise SettingsError(f"served model {m.name!r}: {exc}") from None
        served.append(ServedCheckpoint.from_manifest(m, manifest))
    return tuple(served)
