"""What the offline tools ask of Fish Speech S2 Pro: `say`'s request (text in the model's own voice, or cloned
from --ref-audio with its --ref-text: the clip resampled to 44.1 kHz and encoded by the export's dac_encode).
No voice files yet (precompute-voice refuses)."""

from __future__ import annotations

from pathlib import Path

from ttscore.contract import fish_speech as spec
from ttscore.contract.errors import InvalidRequest
from ttscore.runtime.family import SayJob, SayOptions, read_reference
from ttscore.runtime.offline_kit import NoVoiceFiles, refuse_options


class FishOffline(NoVoiceFiles):
    def say(self, artifacts: Path, options: SayOptions) -> SayJob:
        """--voice (omitted or default), --ref-audio + --ref-text, --seed, --max-new-tokens; --greedy: temperature 0."""
        from ttscore.runtime.audio import resample
        from ttscore.runtime.families import load_model
        from ttscore.runtime.families.fish_speech.model import FishModel
        from ttscore.runtime.families.fish_speech.request import FishRequest

        o = options
        refuse_options(o, spec.DISPLAY, ("language", "instructions"))
        if o.voice is not None and o.voice.lower() != spec.DEFAULT_VOICE:
            raise InvalidRequest(f"{spec.DISPLAY} has no built-in speakers: omit --voice or use "
                                 f"'{spec.DEFAULT_VOICE}'", "voice")
        audio = None
        if o.ref_audio:
            wav, rate = read_reference(o.ref_audio)
            audio = resample(wav, rate, spec.SAMPLE_RATE)
        model = load_model(artifacts)
        assert isinstance(model, FishModel)
        req = FishRequest(text=o.text, ref_audio=audio, ref_text=o.ref_text, max_new_tokens=o.max_new_tokens,
                          seed=o.seed, temperature=0.0 if o.greedy else None)
        return SayJob(model, req, model.sample_rate, "frames")


OFFLINE = FishOffline(f"{spec.DISPLAY}: no voice files yet (clone with --ref-audio and --ref-text)",
                      f"{spec.DISPLAY} yet (upload the voice instead)")
