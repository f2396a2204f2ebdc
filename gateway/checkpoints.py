"""The served checkpoints: each deployment entry with the facts the Speech API needs from its manifest.

Speakers, languages and the sample rate are read from each checkpoint's `manifest.json` when the
gateway starts (`load_checkpoints`), so a bad deployment fails at startup with one clear message,
not on the first request. Each checkpoint is handed its family's gateway adapter here, once (the record,
`ServedCheckpoint`, is gateway.family's).
"""

from __future__ import annotations

from ttscore.contract import families
from ttscore.contract.errors import TTSError
from ttscore.contract.manifest import Manifest, read_manifest

from .families import adapter
from .family import ServedCheckpoint
from .settings import CheckpointSettings, Settings, SettingsError


def from_manifest(settings: CheckpointSettings, manifest: Manifest) -> ServedCheckpoint:
    """A deployment entry with its manifest's facts and its family's adapter (SettingsError naming what is
    wrong)."""
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
    family_adapter = adapter(manifest.family)
    return ServedCheckpoint(
        settings=settings,
        adapter=family_adapter,
        speakers=speakers,
        # A family that refuses `language` outright lists none (not even "Auto": naming it is a 400).
        languages=tuple(sorted({*manifest.languages, "auto"})) if rules.auto_language else (),
        sample_rate=manifest.sample_rate,
        samples_per_frame=manifest.samples_per_frame,
        model_size=manifest.model_size,
        speaker_embed_dim=manifest.speaker_embed_dim,
        num_code_groups=manifest.num_code_groups,
        family=manifest.family,
        facts=family_adapter.manifest_facts(manifest),
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
        served.append(from_manifest(m, manifest))
    return tuple(served)


__all__ = ["ServedCheckpoint", "from_manifest", "load_checkpoints"]
