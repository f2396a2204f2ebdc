"""What the offline tools ask of Breeze-TTS-2 (ttscore.runtime.family.OfflineTools): `say`'s request
(plain, design, clone, direction) and voice files (precompute-voice: the reference clip's codes and
its transcript, ttscore.contract.breeze_tts_2.voicefile)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ttscore.contract.errors import InvalidRequest
from ttscore.runtime.family import Progress, SayJob, SayOptions, VoiceFileOptions, read_reference
from ttscore.runtime.offline_kit import Export, check_voice_mode, ref_text_needs_audio, refuse_options


def precompute_voice(artifacts: str | Path, voice_name: str, ref_audio_path: str | Path, ref_text: str | None,
                     output_dir: str | Path, speaker_description: str | None = None) -> dict[str, Any]:
    """A Breeze-TTS-2 voice from the exported checkpoint in `artifacts`: the clip's codes (as its
    breeze_speech_encoder computes them) and the transcript, with the codec's checksum."""
    from ttscore.contract import breeze_tts_2 as spec
    from ttscore.contract.breeze_tts_2.voicefile import (
        CODEC_SHA256,
        CODEC_WEIGHTS,
        write_breeze_tts_2_profile,
    )
    from ttscore.contract.voicefile import validate_voice_name
    from ttscore.runtime.families.breeze_tts_2.model import encode_reference

    name = validate_voice_name(voice_name, "voice_name")
    if not (ref_text or "").strip():
        raise InvalidRequest("a Breeze-TTS-2 voice needs the transcript of the reference audio (--ref-text)",
                             "ref_text")
    export = Export.of(artifacts, spec.FAMILY, "Breeze-TTS-2")
    graph = export.graph("speech_encoder")
    audio, sr = read_reference(ref_audio_path)
    codes = encode_reference(graph, audio, sr)
    return write_breeze_tts_2_profile(
        output_dir, name, ref_codes=codes, ref_text=ref_text, checkpoint=export.identity(CODEC_SHA256, CODEC_WEIGHTS),
        speaker_description=speaker_description)


class BreezeOffline:
    voice_modes: tuple[str, ...] = ("clone",)  # ttscore.contract.breeze_tts_2.voicefile.PROFILE_MODES
    voice_help: str = "Breeze-TTS-2: clone (the reference codes and --ref-text, its transcript)"

    def say(self, artifacts: Path, options: SayOptions) -> SayJob:
        """--voice S0..S9, --instructions (design; with a reference: direction), --ref-audio +
        --ref-text (clone). Decoding is greedy whatever --greedy says."""
        from ttscore.runtime.families import load_model
        from ttscore.runtime.families.breeze_tts_2.model import BreezeModel
        from ttscore.runtime.families.breeze_tts_2.request import BreezeRequest

        o = options
        refuse_options(o, "Breeze-TTS-2", ("language",))
        ref_text_needs_audio(o)
        model = load_model(artifacts, encoders=bool(o.ref_audio))
        assert isinstance(model, BreezeModel)
        req = BreezeRequest(text=o.text, voice=o.voice, instructions=o.instructions, ref_text=o.ref_text,
                            max_new_tokens=o.max_new_tokens, seed=o.seed)
        if o.ref_audio:
            wav, sr = read_reference(o.ref_audio)
            req.ref_codes = model.encode_reference(wav, sr)
        return SayJob(model, req, model.info.sample_rate, "frames")

    def precompute_voice(self, artifacts: Path, options: VoiceFileOptions, progress: Progress
                         ) -> tuple[dict[str, Any], str]:
        o = options
        check_voice_mode(o.mode, self.voice_modes, "Breeze-TTS-2")
        progress(1, 1, f"encoding the reference with {artifacts.name}'s speech encoder and writing the voice file")
        entry = precompute_voice(artifacts, o.voice_name, o.ref_audio, o.ref_text, o.output_dir,
                                 o.speaker_description)
        return entry, f"Breeze-TTS-2 clone, codes [{entry['ref_code_length']}, {entry['num_codebooks']}]"


OFFLINE = BreezeOffline()
