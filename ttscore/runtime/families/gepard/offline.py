"""What the offline tools ask of Gepard-1.0 (ttscore.runtime.family.OfflineTools): `say`'s request
(text in the default voice). There are no voice files: Gepard has one voice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ttscore.contract.errors import InvalidRequest
from ttscore.runtime.family import Progress, SayJob, SayOptions, VoiceFileOptions


class GepardOffline:
    voice_modes: tuple[str, ...] = ()
    voice_help: str = "Gepard-1.0: no voice files (its only voice is 'default')"

    def say(self, artifacts: Path, options: SayOptions) -> SayJob:
        """--voice (omitted or default), --seed, --max-new-tokens; everything else is refused.
        Sampling is Gumbel-max at temperature 0.3 whatever --greedy says."""
        from ttscore.runtime.families import load_model
        from ttscore.runtime.families.gepard.model import GepardModel
        from ttscore.runtime.families.gepard.request import GepardRequest

        o = options
        for given, name in ((o.language, "language"), (o.instructions, "instructions"), (o.ref_audio, "ref_audio"),
                            (o.ref_text, "ref_text")):
            if given:
                raise InvalidRequest(f"--{name.replace('_', '-')} is not supported by Gepard-1.0", name)
        if o.x_vector_only or o.non_streaming_mode is not None:
            raise InvalidRequest("--x-vector-only/--non-streaming-mode are Qwen3-TTS options", "ref_audio")
        model = load_model(artifacts)
        assert isinstance(model, GepardModel)
        req = GepardRequest(text=o.text, voice=o.voice, max_new_tokens=o.max_new_tokens, seed=o.seed)
        return SayJob(model, req, model.info.sample_rate, "frames")

    def precompute_voice(self, artifacts: Path, options: VoiceFileOptions, progress: Progress
                         ) -> tuple[dict[str, Any], str]:
        raise InvalidRequest("precompute-voice does not support Gepard-1.0 (its only voice is 'default')",
                             "checkpoint")


OFFLINE = GepardOffline()
