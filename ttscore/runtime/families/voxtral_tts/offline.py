"""What the offline tools ask of Voxtral TTS: `say`'s request (text in a preset voice). No voice files:
the public checkpoint has no codec encoder, so it cannot clone."""

from __future__ import annotations

from pathlib import Path

from ttscore.runtime.family import SayJob, SayOptions
from ttscore.runtime.offline_kit import NoVoiceFiles, refuse_options


class VoxtralOffline(NoVoiceFiles):
    def say(self, artifacts: Path, options: SayOptions) -> SayJob:
        """--voice (a preset, required), --seed (the flow-matching noise), --max-new-tokens."""
        from ttscore.runtime.families import load_model
        from ttscore.runtime.families.voxtral_tts.model import VoxtralModel
        from ttscore.runtime.families.voxtral_tts.request import VoxtralRequest

        o = options
        refuse_options(o, "Voxtral TTS", ("language", "instructions", "ref_audio", "ref_text"))
        model = load_model(artifacts)
        assert isinstance(model, VoxtralModel)
        req = VoxtralRequest(text=o.text, voice=o.voice, max_new_tokens=o.max_new_tokens, seed=o.seed)
        return SayJob(model, req, model.sample_rate, "frames")


OFFLINE = VoxtralOffline("Voxtral TTS: no voice files (preset voices only; the checkpoint has no encoder)",
                         "Voxtral TTS (the checkpoint has no codec encoder)")
