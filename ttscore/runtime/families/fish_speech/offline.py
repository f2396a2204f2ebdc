"""What the offline tools ask of Fish Speech S2 Pro: `say`'s request (text in the model's own voice, or cloned
from --ref-audio with its --ref-text: the clip resampled to 44.1 kHz and encoded by the export's dac_encode).
No voice files yet (precompute-voice refuses)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ttscore.contract import fish_speech as spec
from ttscore.contract.errors import InvalidRequest
from ttscore.runtime.family import Progress, SayJob, SayOptions, VoiceFileOptions, read_reference


class FishOffline:
    voice_modes: tuple[str, ...] = ()
    voice_help: str = "Fish Speech S2 Pro: no voice files yet (clone with --ref-audio and --ref-text)"

    def say(self, artifacts: Path, options: SayOptions) -> SayJob:
        """--voice (omitted or default), --ref-audio + --ref-text, --seed, --max-new-tokens; --greedy: temperature 0."""
        from ttscore.runtime.audio import resample
        from ttscore.runtime.families import load_model
        from ttscore.runtime.families.fish_speech.model import FishModel
        from ttscore.runtime.families.fish_speech.request import FishRequest

        o = options
        for given, name in ((o.language, "language"), (o.instructions, "instructions")):
            if given:
                raise InvalidRequest(f"--{name} is not supported by {spec.DISPLAY}", name)
        if o.x_vector_only or o.non_streaming_mode is not None:
            raise InvalidRequest("--x-vector-only/--non-streaming-mode are Qwen3-TTS options", "ref_audio")
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

    def precompute_voice(self, artifacts: Path, options: VoiceFileOptions, progress: Progress
                         ) -> tuple[dict[str, Any], str]:
        raise InvalidRequest(f"precompute-voice does not support {spec.DISPLAY} yet (upload the voice instead)",
                             "checkpoint")


OFFLINE = FishOffline()
