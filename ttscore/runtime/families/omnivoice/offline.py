"""What the offline tools ask of OmniVoice (ttscore.runtime.family.OfflineTools): `say`'s request
(auto voice, voice design with --instructions, or cloning with --ref-audio [+ --ref-text]: the
clip's codes through the exported codec encoder, `clone.ReferenceEncoder`, and the transcript as the
reference's create_voice_clone_prompt leaves it) and voice files (precompute-voice: those codes and
the optional transcript, ttscore.contract.omnivoice.voicefile)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ttscore.contract import omnivoice as spec
from ttscore.contract.errors import InvalidRequest
from ttscore.runtime.family import Progress, SayJob, SayOptions, VoiceFileOptions, read_reference
from ttscore.runtime.offline_kit import Export, check_voice_mode, ref_text_needs_audio, refuse_options


def precompute_voice(artifacts: str | Path, voice_name: str, ref_audio_path: str | Path, ref_text: str | None,
                     output_dir: str | Path, speaker_description: str | None = None) -> dict[str, Any]:
    """An OmniVoice voice from the exported checkpoint in `artifacts`: the clip's codes [8, T] as its
    codec_encoder computes them after the reference's preprocessing (clone.ReferenceEncoder, what
    `ref_audio` gets when served), the transcript if given, and the codec's checksum."""
    from ttscore.contract.omnivoice.voicefile import CODEC_SHA256, CODEC_WEIGHTS, write_omnivoice_profile
    from ttscore.contract.voicefile import validate_voice_name
    from ttscore.runtime.families.omnivoice.clone import ReferenceEncoder

    name = validate_voice_name(voice_name, "voice_name")
    export = Export.of(artifacts, spec.FAMILY, spec.RULES.name)
    audio, sr = read_reference(ref_audio_path)
    codes = ReferenceEncoder(export.root, export.manifest, None).codes(audio, sr)
    return write_omnivoice_profile(
        output_dir, name, ref_codes=codes, ref_text=ref_text, checkpoint=export.identity(CODEC_SHA256, CODEC_WEIGHTS),
        speaker_description=speaker_description)


class OmniVoiceOffline:
    voice_modes: tuple[str, ...] = ("clone",)  # ttscore.contract.omnivoice.voicefile.PROFILE_MODES
    voice_help: str = "OmniVoice: clone (the reference codes and, optionally, --ref-text, its transcript)"

    def say(self, artifacts: Path, options: SayOptions) -> SayJob:
        from ttscore.runtime.families import load_model
        from ttscore.runtime.families.omnivoice.request import OmniVoiceRequest

        o = options
        if o.voice not in (None, "default"):
            raise InvalidRequest(f"Unknown voice {o.voice!r}: {spec.RULES.name} has no built-in voices (omit --voice)",
                                 "voice")
        ref_text_needs_audio(o)
        refuse_options(o, spec.RULES.name, qwen_param="x_vector_only_mode")
        model = load_model(artifacts)
        ref_codes, ref_text = None, None
        if o.ref_audio:
            from ttscore.contract.manifest import read_manifest
            from ttscore.contract.omnivoice.text import clone_ref_text
            from ttscore.runtime.families.omnivoice.clone import ReferenceEncoder

            audio, sr = read_reference(o.ref_audio)
            ref_codes = ReferenceEncoder(Path(artifacts), read_manifest(artifacts), None).codes(audio, sr)
            ref_text = clone_ref_text(o.ref_text) if o.ref_text and o.ref_text.strip() else None
        request = OmniVoiceRequest(text=o.text, language=o.language, instructions=o.instructions, seed=o.seed,
                                   max_new_tokens=o.max_new_tokens, ref_codes=ref_codes, ref_text=ref_text,
                                   position_temperature=0.0 if o.greedy else None)
        return SayJob(model, request, spec.SAMPLE_RATE, "frames")

    def precompute_voice(self, artifacts: Path, options: VoiceFileOptions, progress: Progress
                         ) -> tuple[dict[str, Any], str]:
        o = options
        check_voice_mode(o.mode, self.voice_modes, spec.RULES.name)
        progress(1, 1, f"encoding the reference with {artifacts.name}'s codec encoder and writing the voice file")
        entry = precompute_voice(artifacts, o.voice_name, o.ref_audio, o.ref_text, o.output_dir,
                                 o.speaker_description)
        return entry, (f"{spec.RULES.name} clone, codes [{entry['num_codebooks']}, {entry['ref_code_length']}]"
                       + ("" if "ref_text" in entry else ", no transcript"))


OFFLINE = OmniVoiceOffline()
