"""What the offline tools ask of MOSS-TTS-Nano: `say`'s request (the text in the voice of --ref-audio, mixed to mono,
resampled to 48 kHz and encoded by the export's moss_codec_encoder; --ref-text is accepted and ignored, as the
served path ignores `ref_text`). No voice files yet (precompute-voice refuses)."""

from __future__ import annotations

from pathlib import Path

from ttscore.contract.errors import InvalidRequest
from ttscore.contract.moss_tts_nano import rules
from ttscore.runtime.family import SayJob, SayOptions, read_reference
from ttscore.runtime.offline_kit import NoVoiceFiles, refuse_options


class MossOffline(NoVoiceFiles):
    def say(self, artifacts: Path, options: SayOptions) -> SayJob:
        """--ref-audio (required), --seed, --max-new-tokens (frames per text chunk); --greedy: do_sample false."""
        from ttscore.runtime import sinc_resample
        from ttscore.runtime.families import load_model
        from ttscore.runtime.families.moss_tts_nano.model import MossModel
        from ttscore.runtime.families.moss_tts_nano.request import MossRequest

        o = options
        refuse_options(o, rules.DISPLAY, ("language", "instructions"))
        if o.voice is not None and o.voice.lower() != rules.DEFAULT_VOICE:
            raise InvalidRequest(f"Unknown voice '{o.voice}'. {rules.DISPLAY} has no built-in speakers: clone one "
                                 "with --ref-audio", "voice")
        if not o.ref_audio:
            raise InvalidRequest(f"{rules.DISPLAY} requires --ref-audio (reference audio for voice cloning)",
                                 "ref_audio")
        wav, rate = read_reference(o.ref_audio)
        model = load_model(artifacts, encoders=True)
        assert isinstance(model, MossModel)
        req = MossRequest(text=o.text, ref_audio=sinc_resample.resample(wav, rate, model.sample_rate),
                          max_new_tokens=o.max_new_tokens, seed=o.seed, do_sample=False if o.greedy else None)
        return SayJob(model, req, model.sample_rate, "frames")


OFFLINE = MossOffline(f"{rules.DISPLAY}: no voice files yet (clone with --ref-audio)",
                      f"{rules.DISPLAY} yet (upload the voice instead)")
