"""What the offline tools ask of OmniVoice (ttscore.runtime.family.OfflineTools): `say`'s request
(auto voice, voice design with --instructions, or cloning with --ref-audio [+ --ref-text]: the
clip's codes through the exported codec encoder, `clone.ReferenceEncoder`, and the transcript as the
reference's create_voice_clone_prompt leaves it). precompute-voice is not supported yet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ttscore.contract import omnivoice as spec
from ttscore.contract.errors import InvalidRequest
from ttscore.runtime.family import Progress, SayJob, SayOptions, VoiceFileOptions


class OmniVoiceOffline:
    voice_modes: tuple[str, ...] = ()
    voice_help: str = "OmniVoice: not yet (say clones with --ref-audio)"

    def say(self, artifacts: Path, options: SayOptions) -> SayJob:
        from ttscore.runtime.families import load_model
        from ttscore.runtime.families.omnivoice.request import OmniVoiceRequest

        o = options
        if o.voice not in (None, "default"):
            raise InvalidRequest(f"Unknown voice {o.voice!r}: {spec.RULES.name} has no built-in voices (omit --voice)",
                                 "voice")
        if o.ref_text and not o.ref_audio:
            raise InvalidRequest("--ref-text needs --ref-audio", "ref_text")
        if o.x_vector_only or o.non_streaming_mode is not None:
            raise InvalidRequest("--x-vector-only/--non-streaming-mode are Qwen3-TTS options", "x_vector_only_mode")
        model = load_model(artifacts)
        ref_codes, ref_text = None, None
        if o.ref_audio:
            from ttscore.contract.manifest import read_manifest
            from ttscore.contract.omnivoice_text import clone_ref_text
            from ttscore.runtime.families.omnivoice.clone import ReferenceEncoder
            from ttscore.runtime.family import read_reference

            audio, sr = read_reference(o.ref_audio)
            ref_codes = ReferenceEncoder(Path(artifacts), read_manifest(artifacts), None).codes(audio, sr)
            ref_text = clone_ref_text(o.ref_text) if o.ref_text and o.ref_text.strip() else None
        request = OmniVoiceRequest(text=o.text, language=o.language, instructions=o.instructions, seed=o.seed,
                                   max_new_tokens=o.max_new_tokens, ref_codes=ref_codes, ref_text=ref_text,
                                   position_temperature=0.0 if o.greedy else None)
        return SayJob(model, request, spec.SAMPLE_RATE, "frames")

    def precompute_voice(self, artifacts: Path, options: VoiceFileOptions, progress: Progress) -> tuple[dict[str, Any], str]:
        raise InvalidRequest(f"precompute-voice is not supported for {spec.RULES.name} yet", "checkpoint")


OFFLINE = OmniVoiceOffline()
