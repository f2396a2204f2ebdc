"""What the offline tools ask of OmniVoice (ttscore.runtime.family.OfflineTools): `say`'s request
(auto voice, or voice design with --instructions). Cloning needs the codec encoder (not exported
yet), so --ref-audio and precompute-voice are refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ttscore.contract import omnivoice as spec
from ttscore.contract.errors import InvalidRequest
from ttscore.runtime.family import Progress, SayJob, SayOptions, VoiceFileOptions


class OmniVoiceOffline:
    voice_modes: tuple[str, ...] = ()
    voice_help: str = "OmniVoice: not yet (its codec encoder is not exported)"

    def say(self, artifacts: Path, options: SayOptions) -> SayJob:
        from ttscore.runtime.families import load_model
        from ttscore.runtime.families.omnivoice.request import OmniVoiceRequest

        o = options
        if o.voice not in (None, "default"):
            raise InvalidRequest(f"Unknown voice {o.voice!r}: {spec.RULES.name} has no built-in voices (omit --voice)",
                                 "voice")
        if o.ref_audio or o.ref_text:
            raise InvalidRequest(f"--ref-audio/--ref-text: cloning is not supported offline for {spec.RULES.name} yet",
                                 "ref_audio")
        if o.x_vector_only or o.non_streaming_mode is not None:
            raise InvalidRequest("--x-vector-only/--non-streaming-mode are Qwen3-TTS options", "x_vector_only_mode")
        model = load_model(artifacts)
        request = OmniVoiceRequest(text=o.text, language=o.language, instructions=o.instructions, seed=o.seed,
                                   max_new_tokens=o.max_new_tokens,
                                   position_temperature=0.0 if o.greedy else None)
        return SayJob(model, request, spec.SAMPLE_RATE, "frames")

    def precompute_voice(self, artifacts: Path, options: VoiceFileOptions, progress: Progress) -> tuple[dict[str, Any], str]:
        raise InvalidRequest(f"precompute-voice is not supported for {spec.RULES.name} yet", "checkpoint")


OFFLINE = OmniVoiceOffline()
