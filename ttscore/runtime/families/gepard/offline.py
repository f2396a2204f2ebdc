"""What the offline tools ask of Gepard-1.0 (ttscore.runtime.family.OfflineTools): `say`'s request
(text in the default voice). There are no voice files: Gepard has one voice."""

from __future__ import annotations

from pathlib import Path

from ttscore.runtime.family import SayJob, SayOptions
from ttscore.runtime.offline_kit import NoVoiceFiles, refuse_options


class GepardOffline(NoVoiceFiles):
    def say(self, artifacts: Path, options: SayOptions) -> SayJob:
        """--voice (omitted or default), --seed, --max-new-tokens; everything else is refused.
        Sampling is Gumbel-max at temperature 0.3 whatever --greedy says."""
        from ttscore.runtime.families import load_model
        from ttscore.runtime.families.gepard.model import GepardModel
        from ttscore.runtime.families.gepard.request import GepardRequest

        o = options
        refuse_options(o, "Gepard-1.0", ("language", "instructions", "ref_audio", "ref_text"))
        model = load_model(artifacts)
        assert isinstance(model, GepardModel)
        req = GepardRequest(text=o.text, voice=o.voice, max_new_tokens=o.max_new_tokens, seed=o.seed)
        return SayJob(model, req, model.info.sample_rate, "frames")


OFFLINE = GepardOffline("Gepard-1.0: no voice files (its only voice is 'default')",
                        "Gepard-1.0 (its only voice is 'default')")
