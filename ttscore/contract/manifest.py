"""`manifest.json`: what `triton-tts export` promises about an artifacts directory, written and read
in one place.

Every family's exporter builds it with `build_manifest` (the fields every reader relies on, one
vocoder state key for every family, checked by reading it back); the runtime, the Triton models, the
repository renderer, the CLI and the gateway read it only through `read_manifest`, which checks the
format version and turns every field those readers rely on into a typed attribute. Family-specific
details stay in `raw` (e.g. the checkpoint's own configs) for that family's runtime to interpret.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ttscore.contract import families
from ttscore.contract.errors import ArtifactError, ExportError
from ttscore.contract.graphs import GraphSpec

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
# Manifests written before families existed came from the first family (the first registered).
DEFAULT_FAMILY = next(iter(families.RULES))
# The streaming vocoder's per-stream state ({"state_size", "state_layout"}), the same key for every
# family; manifests written before it used a family's own key, still read.
VOCODER = "vocoder"
LEGACY_VOCODER_KEYS = ("code2wav", "vae_decoder")
# A startup LoRA adapter merged into the exported weights: its identity (name, format, sha256, r,
# alpha, ...); absent when the export has none.
ADAPTER = "adapter"


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


@dataclass(frozen=True)
class Manifest:
    path: Path  # the artifacts directory
    family: str
    variant: str  # the family's checkpoint variant (Qwen3-TTS: custom_voice, voice_design, base)
    precision: str
    fingerprint: str | None  # of the source checkpoint: decides whether a re-export is needed
    sample_rate: int | None  # None only in partial manifests (a vocoder-only test export)
    samples_per_frame: int | None
    model_size: str
    speakers: dict[str, int]  # preset speaker name -> codec id (CustomVoice)
    languages: tuple[str, ...]  # lower-case
    graphs: Mapping[str, Mapping[str, Any]]  # graph name -> GraphSpec JSON (+ validation report)
    raw: Mapping[str, Any] = field(repr=False)

    @property
    def export_revision(self) -> int:
        """The family's export format it was made at (export.family.ExportFamily.revision; 1 before it was kept)."""
        value = self.raw.get("export_revision", 1)
        return value if isinstance(value, int) else 1

    @property
    def configs(self) -> Mapping[str, Any]:
        """The checkpoint's config files, as exported (family-specific)."""
        return self.raw.get("configs") or {}

    def config(self, name: str) -> dict[str, Any]:
        """The checkpoint's config file `name` as exported; ArtifactError when the manifest has none."""
        cfg = self.configs.get(name)
        if not isinstance(cfg, Mapping):
            raise ArtifactError(f"{self.path / MANIFEST} has no configs[{name!r}]: re-export")
        return dict(cfg)

    @property
    def num_code_groups(self) -> int | None:
        return _int_or_none((self.raw.get("sizes") or {}).get("num_code_groups"))

    @property
    def vocoder(self) -> Mapping[str, Any]:
        """The streaming vocoder's state: `state_size` (floats per stream) and `state_layout`."""
        for key in (VOCODER, *LEGACY_VOCODER_KEYS):
            entry = self.raw.get(key)
            if isinstance(entry, Mapping):
                return entry
        return {}

    @property
    def vocoder_state_size(self) -> int | None:
        """Floats of the streaming vocoder's per-stream state (None: not exported)."""
        return _int_or_none(self.vocoder.get("state_size"))

    @property
    def code2wav_state_size(self) -> int | None:
        """The old name of `vocoder_state_size` (the Qwen3-TTS readers')."""
        return self.vocoder_state_size

    @property
    def vae_decoder_state_size(self) -> int | None:
        """The old name of `vocoder_state_size` (the VoxCPM2 readers')."""
        return self.vocoder_state_size

    @property
    def speaker_embed_dim(self) -> int | None:
        """The x-vector size of a voice-cloning checkpoint (None: unknown)."""
        config = self.configs.get("config.json") or {}
        dim = _int_or_none((config.get("speaker_encoder_config") or {}).get("enc_dim"))
        if dim is None:
            dim = _int_or_none(((self.raw.get("sizes") or {}).get("talker") or {}).get("hidden_size"))
        return dim

    @property
    def adapter(self) -> Mapping[str, Any] | None:
        """The startup LoRA adapter merged into these artifacts (`name`, `sha256`, ...), or None."""
        entry = self.raw.get(ADAPTER)
        return entry if isinstance(entry, Mapping) and isinstance(entry.get("sha256"), str) else None

    @property
    def adapter_sha256(self) -> str | None:
        return str(self.adapter["sha256"]) if self.adapter else None

    def source_sha256(self, relative: str) -> str | None:
        """Checksum of one source checkpoint file (e.g. to tell whether two checkpoints share a vocoder)."""
        entry = ((self.raw.get("source") or {}).get("files") or {}).get(relative) or {}
        sha = entry.get("sha256")
        return sha if isinstance(sha, str) else None

    @classmethod
    def parse(cls, path: Path, raw: Mapping[str, Any]) -> Manifest:
        where = path / MANIFEST
        if raw.get("format_version") != MANIFEST_FORMAT:
            raise ArtifactError(
                f"{where} has format_version {raw.get('format_version')}, expected {MANIFEST_FORMAT}: re-export"
            )
        try:
            speakers = {str(k).lower(): int(v) for k, v in (raw.get("speakers") or {}).items()}
            return cls(
                path=path,
                family=str(raw.get("family") or DEFAULT_FAMILY),
                variant=str(raw.get("variant", "")),
                precision=str(raw.get("precision", "fp32")),
                fingerprint=(raw.get("source") or {}).get("fingerprint"),
                sample_rate=_int_or_none(raw.get("sample_rate")),
                samples_per_frame=_int_or_none(raw.get("samples_per_frame")),
                model_size=str(raw.get("model_size", "")),
                speakers=speakers,
                languages=tuple(str(x).lower() for x in raw.get("languages") or ()),
                graphs=dict(raw.get("graphs") or {}),
                raw=raw,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ArtifactError(f"{where} lacks or mistypes {exc}: re-export") from None


def build_manifest(
    directory: Path,
    *,
    family: str,
    variant: str,
    model_size: str,
    precision: str,
    source: Mapping[str, Any],
    sizes: Mapping[str, Any],
    sample_rate: int,
    samples_per_frame: int,
    vocoder_state_size: int,
    vocoder_state_layout: Sequence[Any],
    graphs: Mapping[str, GraphSpec],
    validation: Mapping[str, Mapping[str, Any]],
    speakers: Mapping[str, int] | None = None,
    languages: Sequence[str] = (),
    tables: Mapping[str, Any] | None = None,
    configs: Mapping[str, Any] | None = None,
    memory: Mapping[str, Any] | None = None,
    versions: Mapping[str, Any] | None = None,
    device: str = "cpu",
    adapter: Mapping[str, Any] | None = None,
    vocoder: bool = True,
    **family_fields: Any,
) -> dict[str, Any]:
    """The manifest.json of an export into `directory`, the same for every family: each graph in
    `graphs` must have been written there (its entry is its spec plus its `validation` report), and
    the result must read back (`Manifest.parse`) with its sample rate, frame size and vocoder state.
    `family_fields` are the family's own top-level fields, for its runtime. `adapter`: the identity
    of a startup LoRA adapter merged into the weights (at least `name` and `sha256`), else None.
    `vocoder` False: an export that makes no audio (the forced aligner) has no vocoder state to record.
    ExportError otherwise."""
    entries: dict[str, Any] = {}
    for name, spec in graphs.items():
        if not (directory / spec.filename).is_file():
            raise ExportError(f"export produced no {spec.filename}")
        entries[name] = {**spec.to_json(), "validation": dict(validation.get(name, {}))}
    clash = set(family_fields) & {VOCODER, *LEGACY_VOCODER_KEYS, "graphs", "family", "format_version", ADAPTER}
    if clash:
        raise ExportError(f"manifest field {sorted(clash)[0]!r} is not a family's own field")
    raw: dict[str, Any] = {
        "format_version": MANIFEST_FORMAT,
        "family": family,
        "source": dict(source),
        "variant": variant,
        "model_size": model_size,
        "precision": precision,
        "device": device,
        "sizes": dict(sizes),
        **family_fields,
        "speakers": dict(speakers or {}),
        "languages": list(languages),
        "sample_rate": sample_rate,
        "samples_per_frame": samples_per_frame,
        VOCODER: {"state_size": vocoder_state_size, "state_layout": list(vocoder_state_layout)},
        "tables": dict(tables or {}),
        "export": dict(memory or {}),
        "graphs": entries,
        "configs": dict(configs or {}),
        "versions": dict(versions or {}),
    }
    if adapter is not None:
        if not all(isinstance(adapter.get(k), str) and adapter.get(k) for k in ("name", "sha256")):
            raise ExportError("the manifest's adapter needs a name and a sha256")
        raw[ADAPTER] = dict(adapter)
    try:
        manifest = Manifest.parse(directory, raw)
    except ArtifactError as exc:
        raise ExportError(f"the manifest does not read back: {exc}") from None
    missing = [what for what, value in (("sample_rate", manifest.sample_rate), ("samples_per_frame",
               manifest.samples_per_frame), ("vocoder state_size", manifest.vocoder_state_size if vocoder else 0))
               if value is None]
    if not family or missing:
        raise ExportError(f"the manifest lacks {', '.join(missing) or 'family'} (positive integers)")
    return raw


def read_manifest(artifacts: str | Path) -> Manifest:
    root = Path(artifacts)
    path = root / MANIFEST
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ArtifactError(f"{artifacts} holds no {MANIFEST}: run `triton-tts export` first") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise ArtifactError(f"{path} is unreadable: {exc}") from None
    if not isinstance(raw, dict):
        raise ArtifactError(f"{path} is not a JSON object: re-export")
    return Manifest.parse(root, raw)
