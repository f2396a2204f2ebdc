"""Voice files: the on-disk format of precomputed (and uploaded) voices and the voice-name rules.

Format (the spec's "Precomputed Custom Voices", schema of vllm-omni's shared custom-voice manifest):

    <custom_voice_dir>/custom_voice_manifest.json
        {"schema_version": 1, "model_type": "qwen3_tts",
         "voices": {"<name>": {"name": "<name>", "file": "<name lower>.safetensors", "mode": "xvec" | "icl",
                               "embedding_dim": D, "ref_code_length": T (icl), "ref_text": ... (icl),
                               "speaker_description": ... (optional), "created_at": unix seconds}}}
    <custom_voice_dir>/<name lower>.safetensors
        speaker_embedding  float32 [D]      the x-vector
        ref_code           int32   [T, G]   reference codes, mode "icl" only (G = 16 code groups)

Other families' profiles share the directory and the manifest; their entries name their own family
in "model_type", and what they hold is that family's voice-file module's
(`ttscore.contract.<family>_voicefile`: its `write_<family>_profile` and profile modes). An entry
without "model_type" is the manifest's `model_type` (default "qwen3_tts"). The loader checks a
profile against the served checkpoints of its family (each family's gateway adapter) and a request
for a checkpoint of another family gets a 400 naming `voice`.

Both files are written atomically (temp file in the same directory, fsync, rename), so a serving
process that loads the directory at start-up never sees half a voice. The writer (`triton-tts
precompute-voice`) and the gateway's loader import the names below, so they cannot drift.

The voice-name rules live here too because uploaded voices (gateway.voices.store) and precomputed
voices share one namespace and both become file names.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import unicodedata
from collections.abc import Collection, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ttscore.contract import qwen3_tts
from ttscore.contract.errors import InvalidRequest

MANIFEST_NAME = "custom_voice_manifest.json"
SCHEMA_VERSION = 1
# Of an entry (and a manifest) that names none: vllm-omni's custom-voice schema, whose manifests are Qwen3-TTS ones.
MODEL_TYPE = qwen3_tts.FAMILY
SPEAKER_EMBEDDING = "speaker_embedding"
REF_CODE = "ref_code"
MODES = ("xvec", "icl")
VOICE_FILE_SUFFIX = ".safetensors"
MAX_VOICE_NAME_BYTES = 200  # + ".safetensors" stays under the 255-byte file-name limit

# Unicode categories refused in voice names: controls, format characters (bidi overrides, zero-width
# joiners: invisible and used for spoofing), surrogates, private use, unassigned, line/paragraph separators.
_FORBIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def validate_voice_name(name: str | None, param: str = "name") -> str:
    """The trimmed name, or InvalidRequest naming the rule it breaks.

    Names become file names (lower-cased), so path separators, '.'/'..', control and invisible
    characters are refused; the comparison of names is case-insensitive everywhere.
    """
    if not isinstance(name, str) or not name.strip():
        raise InvalidRequest("Voice name is required", param)
    trimmed = name.strip()
    if trimmed in (".", ".."):
        raise InvalidRequest(f"Invalid voice name {trimmed!r}: '.' and '..' are reserved", param)
    if "/" in trimmed or "\\" in trimmed:
        raise InvalidRequest(f"Invalid voice name {trimmed!r}: must not contain path separators", param)
    bad = next((c for c in trimmed if unicodedata.category(c) in _FORBIDDEN_CATEGORIES), None)
    if bad is not None:
        raise InvalidRequest(
            f"Invalid voice name {trimmed!r}: must not contain control or invisible characters (U+{ord(bad):04X})",
            param,
        )
    if len(voice_key(trimmed).encode("utf-8")) > MAX_VOICE_NAME_BYTES:
        raise InvalidRequest(f"Invalid voice name: longer than {MAX_VOICE_NAME_BYTES} bytes in UTF-8", param)
    return trimmed


def voice_key(name: str) -> str:
    """Case-insensitive identity of a voice name (also its file stem)."""
    return name.strip().lower()


def voice_file_name(name: str) -> str:
    return voice_key(name) + VOICE_FILE_SUFFIX


# --- atomic file writes ---------------------------------------------------------------------------


def fsync_dir(directory: Path) -> None:
    """Make a rename or unlink in `directory` durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes, *, temp_prefix: str = ".tmp-") -> None:
    """Write `data` to `path` so readers see the old file or the new one, never a prefix.

    Temp file in the same directory (same filesystem, so os.replace is atomic), fsync before the
    rename, fsync of the directory after. A crash leaves at worst a `<temp_prefix>*.tmp` file.
    """
    directory = path.parent
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix, suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(directory)


@contextmanager
def _manifest_lock(directory: Path) -> Iterator[None]:
    """Serialize read-modify-write of the manifest between concurrent precompute commands."""
    import fcntl

    with open(directory / f".{MANIFEST_NAME}.lock", "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


# --- writing a voice -------------------------------------------------------------------------------


def write_voice_profile(
    output_dir: str | Path,
    voice_name: str,
    x_vector: NDArray[Any],
    ref_codes: NDArray[Any] | None,
    *,
    mode: str,
    ref_text: str | None = None,
    speaker_description: str | None = None,
) -> dict[str, Any]:
    """Write `<name>.safetensors` and merge the voice into the manifest; returns the manifest entry."""
    name = validate_voice_name(voice_name, "voice_name")
    if mode not in MODES:
        raise InvalidRequest(f"mode must be one of {', '.join(MODES)}, got {mode!r}", "mode")
    ref_text = (ref_text or "").strip() or None
    if mode == "icl" and ref_text is None:
        raise InvalidRequest("mode 'icl' needs the reference transcript (--ref-text)", "ref_text")
    xvec = np.ascontiguousarray(np.asarray(x_vector, dtype=np.float32).reshape(-1))
    if xvec.size == 0 or not np.all(np.isfinite(xvec)):
        raise InvalidRequest("speaker embedding is empty or not finite", "ref_audio")
    tensors = {SPEAKER_EMBEDDING: xvec}
    entry: dict[str, Any] = {"name": name, "file": voice_file_name(name), "mode": mode, "embedding_dim": int(xvec.size)}
    if mode == "icl":
        if ref_codes is None or np.asarray(ref_codes).ndim != 2 or np.asarray(ref_codes).shape[0] == 0:
            raise InvalidRequest("mode 'icl' needs non-empty reference codes [T, groups]", "ref_audio")
        tensors[REF_CODE] = np.ascontiguousarray(np.asarray(ref_codes).astype(np.int32))
        entry["ref_code_length"] = int(tensors[REF_CODE].shape[0])
    if ref_text is not None:
        entry["ref_text"] = ref_text
    return save_voice(output_dir, entry, tensors, speaker_description=speaker_description)


def save_voice(output_dir: str | Path, entry: dict[str, Any], tensors: dict[str, NDArray[Any]], *,
               checkpoint: dict[str, Any] | None = None, speaker_description: str | None = None) -> dict[str, Any]:
    """Finish a voice's manifest entry (the checkpoint's identity, its non-empty string values; the speaker
    description; the time) and write it with its tensors (`merge_voice`); returns the entry. The file's metadata
    repeats the entry's name, mode and family."""
    from safetensors.numpy import save

    if checkpoint:
        entry["checkpoint"] = {k: v for k, v in checkpoint.items() if isinstance(v, str) and v}
    description = (speaker_description or "").strip() or None
    if description is not None:
        entry["speaker_description"] = description
    entry["created_at"] = int(time.time())
    family = entry.get("model_type", MODEL_TYPE)
    payload = save(tensors, metadata={"name": entry["name"], "mode": entry["mode"], "model_type": family})
    merge_voice(Path(output_dir), entry, payload)
    return entry


def write_clone_codes(output_dir: str | Path, voice_name: str, family: str, codes: NDArray[np.int32], *,
                      ref_text: str | None, checkpoint: dict[str, Any] | None = None,
                      speaker_description: str | None = None) -> dict[str, Any]:
    """A cloning voice of a family that clones from a reference clip's codec codes (`codes`: [T, codebooks] as
    `checked_codes` stores them) and the clip's transcript, if any; returns the manifest entry."""
    name = validate_voice_name(voice_name, "voice_name")
    entry: dict[str, Any] = {"name": name, "file": voice_file_name(name), "model_type": family, "mode": "clone"}
    text = (ref_text or "").strip() or None
    if text is not None:
        entry["ref_text"] = text
    entry.update(ref_code_length=int(codes.shape[0]), num_codebooks=int(codes.shape[1]))
    return save_voice(output_dir, entry, {REF_CODE: codes}, checkpoint=checkpoint,
                      speaker_description=speaker_description)


def checked_codes(codes: NDArray[Any], codebooks: int, size: int, *, time_major: bool,
                  param: str = "ref_audio") -> NDArray[np.int32]:
    """A reference clip's codec codes as a voice file stores them ([T, codebooks] int32), given [T, codebooks]
    (`time_major`) or [codebooks, T]; InvalidRequest naming `param` unless a non-empty integer array in
    [0, size)."""
    codes = np.asarray(codes)
    frames_axis = 0 if time_major else 1
    layout = f"[T, {codebooks}]" if time_major else f"[{codebooks}, T]"
    if (codes.ndim != 2 or codes.shape[1 - frames_axis] != codebooks or codes.shape[frames_axis] == 0
            or codes.dtype.kind not in "iu"):
        raise InvalidRequest(f"reference codes must be a non-empty integer {layout} array", param)
    if codes.min() < 0 or codes.max() >= size:
        raise InvalidRequest(f"reference codes must be in [0, {size})", param)
    return np.ascontiguousarray((codes if time_major else codes.T).astype(np.int32))


@dataclass(frozen=True)
class CodesVoices:
    """The voice files of a family that clones from a reference clip's codec codes (`write_clone_codes`):
    `codebooks` codes per frame below `size`, taken [T, codebooks] (`time_major`) or [codebooks, T]."""

    family: str
    codebooks: int
    size: int
    time_major: bool

    def write(self, output_dir: str | Path, voice_name: str, *, ref_codes: NDArray[Any], ref_text: str | None = None,
              checkpoint: dict[str, Any] | None = None, speaker_description: str | None = None) -> dict[str, Any]:
        """Write a voice (`<name>.safetensors` + its manifest entry) of `ref_codes` and the transcript, if any;
        returns the entry. `checkpoint` is its identity ({"name", the family's codec checksum key}), checked by
        the gateway against the served checkpoints."""
        codes = checked_codes(ref_codes, self.codebooks, self.size, time_major=self.time_major)
        return write_clone_codes(output_dir, voice_name, self.family, codes, ref_text=ref_text, checkpoint=checkpoint,
                                 speaker_description=speaker_description)


def check_voices_dir(out: Path, model_types: Collection[str]) -> None:
    """Refuse (InvalidRequest naming `output_dir`) a directory whose voices manifest is unreadable or names
    a model_type none of `model_types` (the served families, ttscore.contract.families): precompute-voice
    never merges into another tool's manifest."""
    manifest_path = out / MANIFEST_NAME
    if not manifest_path.is_file():
        return
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidRequest(f"existing manifest {manifest_path} is unreadable: {exc}", "output_dir") from None
    other = manifest.get("model_type") if isinstance(manifest, dict) else None
    if other is not None and other not in model_types:
        raise InvalidRequest(f"existing manifest {manifest_path} is for model_type {other!r}, not one of "
                             f"{', '.join(model_types)}", "output_dir")


def merge_voice(out: Path, entry: dict[str, Any], payload: bytes) -> None:
    """Write a voice's tensors and merge its entry into the manifest (one directory can hold the
    profiles of several families: an entry of another family than the manifest's names its own)."""
    name = entry["name"]
    out.mkdir(parents=True, exist_ok=True)
    with _manifest_lock(out):
        manifest_path = out / MANIFEST_NAME
        manifest: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "model_type": entry.get("model_type", MODEL_TYPE),
                                    "voices": {}}
        if manifest_path.is_file():
            try:
                manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise InvalidRequest(f"existing manifest {manifest_path} is unreadable: {exc}", "output_dir") from None
            if not isinstance(manifest, dict) or not isinstance(manifest.get("voices", {}), dict):
                raise InvalidRequest(f"existing manifest {manifest_path} is not a voices manifest", "output_dir")
            manifest.setdefault("schema_version", SCHEMA_VERSION)
            manifest.setdefault("model_type", MODEL_TYPE)
        family = entry.get("model_type", MODEL_TYPE)
        if family != manifest["model_type"]:
            entry["model_type"] = family  # (other families' writers always say it)
        voices = manifest.setdefault("voices", {})
        # Names are case-insensitive: a re-run with another spelling replaces the entry, not adds one.
        for key in [k for k in voices if isinstance(k, str) and voice_key(k) == voice_key(name)]:
            del voices[key]
        voices[name] = entry
        # Tensors first, manifest second: a crash in between leaves the old manifest, which still
        # describes the old (or no) file for this name consistently enough for the loader's checks.
        atomic_write_bytes(out / entry["file"], payload)
        atomic_write_bytes(manifest_path, (json.dumps(manifest, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
