"""What the offline tools ask of Voxtral TTS: `say`'s request (text in a preset voice). No voice files:
the public checkpoint has no codec encoder, so it cannot clone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ttscore.contract.errors import InvalidRequest
from ttscore.runtime.family import Progress, SayJob, SayOptions, VoiceFileOptions


class VoxtralOffline:
    voice_modes: tuple[str, ...] = ()
    voice_help: str = "Voxtral TTS: no voice files (preset voices only; the checkpoint has no encoder)"

    def say(self, artifacts: Path, options: SayOptions) -> SayJob:
        """--voice (a preset, required), --seed (the flow-matching noise), --max-new-tokens."""
        from ttscore.runtime.families import load_model
        from ttscore.runtime.families.voxtral_tts.model import VoxtralModel
        from ttscore.runtime.families.voxtral_tts.request import VoxtralRequest

        o = options
        for given, name in ((o.language, "language"), (o.instructions, "instructions"), (o.ref_audio, "ref_audio"),
                            (o.ref_text, "ref_text")):
            if given:
                raise InvalidRequest(f"--{name.replace('_', '-')} is not supported by Voxtral TTS", name)
        if o.x_vector_only or o.non_streaming_mode is not None:
            raise InvalidRequest("--x-vector-only/--non-streaming-mode are Qwen3-TTS options", "ref_audio")
        model = load_model(artifacts)
        assert isinstance(model, VoxtralModel)
        req = VoxtralRequest(text=o.text, voice=o.voice, max_new_tokens=o.max_new_tokens, seed=o.seed)
        return SayJob(model, req, model.sample_rate, "frames")

    def precompute_voice(self, artifacts: Path, options: VoiceFileOptions, progress: Progress
                         ) -> tuple[dict[str, Any], str]:
        raise InvalidRequest("precompute-voice does not support Voxtral TTS (the checkpoint has no codec encoder)",
                             "checkpoint")


OFFLINE = VoxtralOffline()
