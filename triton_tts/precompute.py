"""`triton-tts precompute-voice`: compute a voice's features offline and write a voice file
(format: ttscore.contract.voicefile).

What a voice holds is the family's (its runtime's `offline.precompute_voice`, e.g. a speaker
embedding, or reference latent patches for a prompt mode); this command finds the family from the
export's manifest and writes the voice next to the other voices of the custom_voice_dir."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from triton_tts.progress import add_quiet
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.voicefile import MANIFEST_NAME

logger = logging.getLogger(__name__)


def _families_with_voices() -> list[Any]:
    from ttscore.runtime.families import FAMILIES

    return [f for f in FAMILIES.values() if getattr(f, "offline", None) is not None]


# --- CLI -------------------------------------------------------------------------------------------


def _cmd_precompute_voice(args: argparse.Namespace) -> int:
    from triton_tts import artifacts as artifact_cache
    from triton_tts.progress import Stages
    from ttscore.contract import families
    from ttscore.contract.manifest import read_manifest
    from ttscore.contract.voicefile import check_voices_dir
    from ttscore.runtime.families import FAMILIES
    from ttscore.runtime.family import VoiceFileOptions

    # (an export the checkpoint needs first shows its own stages)
    artifacts = (Path(args.artifacts) if args.artifacts
                 else artifact_cache.ensure_artifacts(args.checkpoint, quiet=args.quiet))
    out = Path(args.output_dir)
    family_name = read_manifest(artifacts).family
    offline = getattr(FAMILIES.get(family_name), "offline", None)
    if offline is None:
        raise InvalidRequest(f"{family_name} checkpoints have no precomputed voices", "checkpoint")
    check_voices_dir(out, tuple(families.RULES))  # never merge into another tool's voices manifest
    options = VoiceFileOptions(
        voice_name=args.voice_name, ref_audio=args.ref_audio, output_dir=out, ref_text=args.ref_text, mode=args.mode,
        speaker_description=args.speaker_description,
    )
    with Stages(f"precompute-voice {args.voice_name}", quiet=args.quiet) as stages:
        entry, described = offline.precompute_voice(artifacts, options, stages.hook)
    print(f"wrote {out / entry['file']} ({described}) and {out / MANIFEST_NAME}")
    return 0


def add_precompute_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register `precompute-voice` on the `triton-tts` sub-command parser."""
    tools = [f.offline for f in _families_with_voices()]
    modes = tuple(dict.fromkeys(mode for t in tools for mode in t.voice_modes))
    p = subparsers.add_parser(
        "precompute-voice",
        help="compute a custom voice offline into a custom_voice_dir (manifest + safetensors)",
        description=(
            "Compute a voice from a reference clip and write <output-dir>/<name>.safetensors plus "
            f"<output-dir>/{MANIFEST_NAME} for the gateway's custom_voice_dir. What the voice holds, by "
            "model family (--mode): " + "; ".join(t.voice_help for t in tools) + "."
        ),
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", "--model", dest="checkpoint",
                     help="checkpoint of a family with voices: directory, Hugging Face cache snapshot or repo id "
                          "(exported into the cache if needed)")
    src.add_argument("--artifacts", help="already exported artifacts directory (skips the export check)")
    p.add_argument("--voice-name", required=True)
    p.add_argument("--ref-audio", required=True, help="reference audio file (wav, flac, ogg, mp3)")
    p.add_argument("--ref-text", "--prompt-text", dest="ref_text",
                   help="transcript of the reference audio (the modes that clone from a transcribed clip)")
    p.add_argument("--mode", choices=modes, default=None, help="; ".join(t.voice_help for t in tools))
    p.add_argument("--output-dir", required=True)
    p.add_argument("--speaker-description", help="free-form description listed by GET /v1/audio/voices")
    add_quiet(p)
    p.set_defaults(func=_cmd_precompute_voice)
    return p
