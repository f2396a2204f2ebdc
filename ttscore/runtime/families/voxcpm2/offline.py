"""What the offline tools ask of VoxCPM2 (ttscore.runtime.family.OfflineTools): `say`'s request
(zero-shot, or cloning from a reference clip) and `precompute-voice`'s voice file: the clip's
latent patches through the exported AudioVAE encoder (the audiovae_encoder Triton model's code, so a
profile equals an uploaded voice), stored for the prompt mode chosen (reference, continuation,
ref_continuation) with the transcript and the checkpoint's identity."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ttscore.contract import voxcpm2 as spec
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.voicefile import validate_voice_name
from ttscore.contract.voxcpm2.voicefile import VOXCPM2_MODES, write_voxcpm2_profile
from ttscore.runtime.family import Progress, SayJob, SayOptions, VoiceFileOptions, read_reference
from ttscore.runtime.offline_kit import Export, ref_text_needs_audio

logger = logging.getLogger(__name__)


def precompute_voice(
    artifacts: str | Path,
    voice_name: str,
    ref_audio_path: str | Path,
    prompt_text: str | None = None,
    mode: str | None = None,
    output_dir: str | Path = ".",
    speaker_description: str | None = None,
) -> dict[str, Any]:
    """A VoxCPM2 profile from the exported checkpoint in `artifacts`: the clip's patches padded for
    the mode (right: the isolated reference; left: the continuation prompt), as audiovae_encoder
    computes them. mode None: "ref_continuation" with a transcript, else "reference"."""
    from ttscore.runtime.families.voxcpm2.checkpoint import parse_config
    from ttscore.runtime.families.voxcpm2.model import encode_reference

    name = validate_voice_name(voice_name, "voice_name")
    text = (prompt_text or "").strip() or None
    mode = mode or ("ref_continuation" if text else "reference")
    if mode not in VOXCPM2_MODES:
        raise InvalidRequest(f"mode must be one of {', '.join(VOXCPM2_MODES)} for VoxCPM2, got {mode!r}", "mode")
    if mode != "reference" and text is None:
        raise InvalidRequest(f"mode {mode!r} needs the transcript of the reference audio (--prompt-text)",
                             "prompt_text")
    export = Export.of(artifacts, spec.FAMILY, "VoxCPM2")
    encoder = export.graph("vae_encoder")
    info = parse_config(dict(export.manifest.configs["config.json"]))
    audio, sr = read_reference(ref_audio_path)
    ref = encode_reference(encoder, info, audio, sr, pad="right") if mode != "continuation" else None
    prompt = encode_reference(encoder, info, audio, sr, pad="left") if mode != "reference" else None
    entry = write_voxcpm2_profile(
        output_dir, name, mode=mode, ref_patches=ref, prompt_patches=prompt, prompt_text=text,
        checkpoint=export.identity("audiovae_sha256", spec.AUDIOVAE_FILE),
        speaker_description=speaker_description,
    )
    logger.info("precomputed VoxCPM2 voice %r (%s) into %s", name, mode, output_dir)
    return entry


class VoxCPM2Offline:
    voice_modes: tuple[str, ...] = VOXCPM2_MODES
    voice_help: str = ("VoxCPM2: reference (isolated reference), continuation (transcribed prompt) or ref_continuation "
                  "(both; the default with --prompt-text)")

    def say(self, artifacts: Path, options: SayOptions) -> SayJob:
        """Zero-shot, or cloning with --ref-audio (+ --ref-text: the reference's continuation mode,
        where the clip is the prompt audio and the text its transcript)."""
        from ttscore.runtime.families.voxcpm2.model import VoxCPM2Model
        from ttscore.runtime.families.voxcpm2.request import VoxCPM2Request

        o = options
        for flag, value in (("--voice", o.voice), ("--language", o.language), ("--instructions", o.instructions)):
            if value:
                raise InvalidRequest(f"{flag} is not supported by VoxCPM2 checkpoints", flag.lstrip("-"))
        if o.x_vector_only or o.greedy or o.non_streaming_mode is not None:
            raise InvalidRequest("--x-vector-only/--greedy/--non-streaming-mode are Qwen3-TTS options", "ref_audio")
        ref_text_needs_audio(o, "ref_audio")
        from ttscore.runtime.families import load_model

        model = load_model(artifacts)
        assert isinstance(model, VoxCPM2Model)
        req = VoxCPM2Request(text=o.text, seed=o.seed, max_new_tokens=o.max_new_tokens)
        if o.ref_audio:
            wav, sr = read_reference(o.ref_audio)
            if o.ref_text:
                req.prompt_patches = model.encode_reference(wav, sr, pad="left")
                req.prompt_text = o.ref_text
            else:
                req.ref_patches = model.encode_reference(wav, sr, pad="right")
        return SayJob(model, req, model.info.sample_rate, "patches")

    def precompute_voice(
        self, artifacts: Path, options: VoiceFileOptions, progress: Progress
    ) -> tuple[dict[str, Any], str]:
        o = options
        progress(1, 1, f"encoding the reference with {artifacts.name}'s AudioVAE and writing the voice file")
        entry = precompute_voice(
            artifacts, o.voice_name, o.ref_audio, prompt_text=o.ref_text, mode=o.mode, output_dir=o.output_dir,
            speaker_description=o.speaker_description,
        )
        patches = entry.get("ref_patch_length", entry.get("prompt_patch_length"))
        return entry, f"VoxCPM2 {entry['mode']}, patches [{patches}, {entry['patch_size']}, {entry['feat_dim']}]"


OFFLINE = VoxCPM2Offline()
