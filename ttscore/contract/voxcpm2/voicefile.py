"""VoxCPM2 precomputed voices: the profile writer (`triton-tts precompute-voice` with a VoxCPM2
checkpoint), over the shared voices format of ttscore.contract.voicefile.

Entries share the directory and the manifest with the other families' and name their family:

        "<name>": {"name", "file", "model_type": "voxcpm2",
                   "mode": "reference" | "continuation" | "ref_continuation",
                   "prompt_text": ... (the continuation modes: the transcript of the prompt clip),
                   "patch_size": P, "feat_dim": D, "ref_patch_length": T (reference modes),
                   "prompt_patch_length": T (continuation modes),
                   "checkpoint": {"name": ..., "audiovae_sha256": ... (when known)}, ...}
    <name lower>.safetensors
        ref_patches     float32 [T, P, D]  the isolated reference, padded on the right ("reference", "ref_continuation")
        prompt_patches  float32 [T, P, D]  the continuation prompt, padded on the left ("continuation", "ref_continuation")

The gateway's VoxCPM2 adapter loads them and checks them against each served checkpoint's patch
shape and AudioVAE checksum.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ttscore.contract.errors import InvalidRequest
from ttscore.contract.voicefile import save_voice, validate_voice_name, voice_file_name
from ttscore.contract.voxcpm2 import FAMILY, PROFILE_MODES, PROMPT_PATCHES, REF_PATCHES

VOXCPM2_MODES = PROFILE_MODES  # the name voicefile gave them
def write_voxcpm2_profile(
    output_dir: str | Path,
    voice_name: str,
    *,
    mode: str,
    ref_patches: NDArray[Any] | None,
    prompt_patches: NDArray[Any] | None,
    prompt_text: str | None = None,
    checkpoint: dict[str, Any] | None = None,
    speaker_description: str | None = None,
) -> dict[str, Any]:
    """Write a VoxCPM2 profile (`<name>.safetensors` + its manifest entry); returns the entry.

    mode "reference": `ref_patches` only; "continuation": `prompt_patches` + `prompt_text`;
    "ref_continuation": all three (the reference's build_prompt_cache modes). `checkpoint` is its
    identity ({"name", "audiovae_sha256"}), checked by the loader against the served checkpoint."""
    name = validate_voice_name(voice_name, "voice_name")
    if mode not in PROFILE_MODES:
        raise InvalidRequest(f"mode must be one of {', '.join(PROFILE_MODES)} for VoxCPM2, got {mode!r}", "mode")
    prompt_text = (prompt_text or "").strip() or None
    wants_ref, wants_prompt = mode in ("reference", "ref_continuation"), mode in ("continuation", "ref_continuation")
    if wants_prompt and prompt_text is None:
        raise InvalidRequest(f"mode {mode!r} needs the transcript of the reference audio (--prompt-text)", "prompt_text")
    if not wants_prompt and prompt_text is not None:
        raise InvalidRequest("mode 'reference' takes no transcript: use mode 'ref_continuation'", "prompt_text")
    tensors: dict[str, NDArray[Any]] = {}
    shape: tuple[int, ...] | None = None
    for key, wanted, value in ((REF_PATCHES, wants_ref, ref_patches), (PROMPT_PATCHES, wants_prompt, prompt_patches)):
        if not wanted:
            continue
        arr = None if value is None else np.ascontiguousarray(np.asarray(value, dtype=np.float32))
        if arr is None or arr.ndim != 3 or 0 in arr.shape or not np.all(np.isfinite(arr)):
            raise InvalidRequest(f"mode {mode!r} needs finite, non-empty {key} [T, P, D]", "ref_audio")
        if shape is not None and arr.shape[1:] != shape:
            raise InvalidRequest(f"{key} {list(arr.shape)} and the other patches differ in [P, D]", "ref_audio")
        shape = arr.shape[1:]
        tensors[key] = arr
    assert shape is not None
    entry: dict[str, Any] = {"name": name, "file": voice_file_name(name), "model_type": FAMILY,
                             "mode": mode, "patch_size": int(shape[0]), "feat_dim": int(shape[1])}
    if REF_PATCHES in tensors:
        entry["ref_patch_length"] = int(tensors[REF_PATCHES].shape[0])
    if PROMPT_PATCHES in tensors:
        entry["prompt_patch_length"] = int(tensors[PROMPT_PATCHES].shape[0])
        entry["prompt_text"] = prompt_text
    return save_voice(output_dir, entry, tensors, checkpoint=checkpoint, speaker_description=speaker_description)
