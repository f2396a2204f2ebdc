"""`manifest.json`: what `triton-tts export` promises about an artifacts directory, read in one place.

Export writes it (export/exporter.py); the runtime, the Triton models, the repository renderer, the
CLI and the gateway read it only through `read_manifest`, which checks the format version and turns
every field those readers rely on into a typed attribute. Family-specific details stay in `raw`
(e.g. the checkpoint's own configs) for that family's runtime to interpret.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ttscore.contract.errors import ArtifactError

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
DEFAULT_FAMILY = "qwen3_tts"  # manifests written before families existed


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
    def configs(self) -> Mapping[str, Any]:
        """The checkpoint's config files, as exported (family-specific)."""
        return self.raw.get("configs") or {}

    @property
    def num_code_groups(self) -> int | None:
        return _int_or_none((self.raw.get("sizes") or {}).get("num_code_groups"))

    @property
    def code2wav_state_size(self) -> int | None:
        return _int_or_none((self.raw.get("code2wav") or {}).get("state_size"))

    @property
    def vae_decoder_state_size(self) -> int | None:
        """VoxCPM2: floats of the streaming AudioVAE decoder's per-stream state."""
        return _int_or_none((self.raw.get("vae_decoder") or {}).get("state_size"))

    @property
    def speaker_embed_dim(self) -> int | None:
        """The x-vector size of a voice-cloning checkpoint (None: unknown)."""
        config = self.configs.get("config.json") or {}
        dim = _int_or_none((config.get("speaker_encoder_config") or {}).get("enc_dim"))
        if dim is None:
            dim = _int_or_none(((self.raw.get("sizes") or {}).get("talker") or {}).get("hidden_size"))
        return dim

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
