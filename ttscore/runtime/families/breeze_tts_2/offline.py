"""What the offline tools ask of Breeze-TTS-2 (ttscore.runtime.family.OfflineTools): `say`'s request
(plain, design, clone, direction). Voice files (precompute-voice) are not written yet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ttscore.contract.errors import InvalidRequest
from ttscore.runtime.family import Progress, SayJob, SayOptions, VoiceFileOptions, read_reference


class BreezeOffline:
    voice_modes: tuple[str, ...] = ()
    voice_help: str = "Breeze-TTS-2: voice files are not supported yet"

    def say(self, artifacts: Path, options: SayOptions) -> SayJob:
        """--voice S0..S9, --instructions (design; with a reference: direction), --ref-audio +
        --ref-text (clone). Decoding is greedy whatever --greedy says."""
        from ttscore.runtime.families import load_model
        from ttscore.runtime.families.breeze_tts_2.model import BreezeModel
        from ttscore.runtime.families.breeze_tts_2.request import BreezeRequest

        o = options
        if o.language:
            raise InvalidRequest("--language is not supported by Breeze-TTS-2", "language")
        if o.x_vector_only or o.non_streaming_mode is not None:
            raise InvalidRequest("--x-vector-only/--non-streaming-mode are Qwen3-TTS options", "ref_audio")
        model = load_model(artifacts, encoders=bool(o.ref_audio))
        assert isinstance(model, BreezeModel)
        req = BreezeRequest(text=o.text, voice=o.voice, instructions=o.instructions, ref_text=o.ref_text,
                            max_new_tokens=o.max_new_tokens, seed=o.seed)
        if o.ref_audio:
            wav, sr = read_reference(o.ref_audio)
            req.ref_codes = model.encode_reference(wav, sr)
        elif o.ref_text:
            raise InvalidRequest("--ref-text needs --ref-audio", "ref_text")
        return SayJob(model, req, model.info.sample_rate, "frames")

    def precompute_voice(self, artifacts: Path, options: VoiceFileOptions, progress: Progress
                         ) -> tuple[dict[str, Any], str]:
        raise InvalidRequest("precompute-voice does not support Breeze-TTS-2 yet", "checkpoint")


OFFLINE = BreezeOffline()
