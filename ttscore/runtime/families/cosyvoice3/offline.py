"""What the offline tools ask of CosyVoice3 (ttscore.runtime.family.OfflineTools): `say`'s request (text in
the voice of a reference clip with its transcript). No voice files yet (uploaded voices are the server's)."""

from __future__ import annotations

from pathlib import Path

from ttscore.contract.errors import InvalidRequest
from ttscore.runtime.family import SayJob, SayOptions, read_reference
from ttscore.runtime.offline_kit import NoVoiceFiles, refuse_options


class CosyVoice3Offline(NoVoiceFiles):
    def say(self, artifacts: Path, options: SayOptions) -> SayJob:
        """--ref-audio and --ref-text (both required), --seed, --max-new-tokens; everything else is refused."""
        from ttscore.contract.manifest import read_manifest
        from ttscore.runtime.families.cosyvoice3.model import CosyVoice3Model
        from ttscore.runtime.families.cosyvoice3.request import CosyVoice3Request

        o = options
        if o.voice not in (None, "default"):
            raise InvalidRequest("CosyVoice3 clones the voice of --ref-audio (no preset voices)", "voice")
        refuse_options(o, "CosyVoice3", ("language", "instructions"))
        if not o.ref_audio:
            raise InvalidRequest("CosyVoice3 requires --ref-audio (a reference clip)", "ref_audio")
        if not o.ref_text:
            raise InvalidRequest("CosyVoice3 requires --ref-text (the transcript of the reference clip)", "ref_text")
        model = CosyVoice3Model(artifacts, read_manifest(artifacts), encoders=True)
        req = CosyVoice3Request(text=o.text, ref_text=o.ref_text, ref_audio=read_reference(o.ref_audio),
                                max_new_tokens=o.max_new_tokens, seed=o.seed)
        return SayJob(model, req, model.sample_rate, "speech tokens")


OFFLINE = CosyVoice3Offline("CosyVoice3: no voice files (upload a voice to the server, or give --ref-audio/--ref-text)",
                            "CosyVoice3 yet (upload the voice to the server)")
