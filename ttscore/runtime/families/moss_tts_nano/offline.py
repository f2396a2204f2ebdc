"""What the offline tools ask of MOSS-TTS-Nano: `say`'s request (the text in the voice of --ref-audio, mixed to mono,
resampled to 48 kHz and encoded by the export's moss_codec_encoder; --ref-text is accepted and ignored, as the
served path ignores `ref_text`) and voice files (precompute-voice: the reference clip's codes [frames, 16] by the same
rule, with the codec's checksum; ttscore.contract.moss_tts_nano.voicefile)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ttscore.contract.errors import InvalidRequest
from ttscore.contract.moss_tts_nano import rules
from ttscore.runtime.family import Progress, SayJob, SayOptions, VoiceFileOptions, read_reference
from ttscore.runtime.offline_kit import Export, check_voice_mode, refuse_options


def precompute_voice(artifacts: str | Path, voice_name: str, ref_audio_path: str | Path, output_dir: str | Path,
                     speaker_description: str | None = None) -> dict[str, Any]:
    """A MOSS-TTS-Nano voice from the export in `artifacts`: the clip's codes [frames, 16] as its
    moss_codec_encoder computes them (encode_reference: the served encoder's and `say`'s rule), with the
    checkpoint's name and its codec's checksum (the manifest's codec.sha256)."""
    from ttscore.contract.moss_tts_nano import codec
    from ttscore.contract.moss_tts_nano.voicefile import (
        CODEC_SHA256,
        manifest_codec_sha256,
        write_moss_tts_nano_profile,
    )
    from ttscore.contract.voicefile import validate_voice_name
    from ttscore.runtime.families.moss_tts_nano.model import encode_reference, encoder_state_size

    name = validate_voice_name(voice_name, "voice_name")
    export = Export.of(artifacts, rules.FAMILY, rules.DISPLAY)
    size = encoder_state_size(export.manifest)
    graph = export.graph(codec.ENCODER)
    audio, rate = read_reference(ref_audio_path)
    codes = encode_reference(graph, size, audio, rate)
    source = Path(str((export.manifest.raw.get("source") or {}).get("path") or export.root))
    identity = {"name": source.name, CODEC_SHA256: manifest_codec_sha256(dict(export.manifest.raw))}
    return write_moss_tts_nano_profile(output_dir, name, ref_codes=codes, checkpoint=identity,
                                       speaker_description=speaker_description)


class MossOffline:
    voice_modes: tuple[str, ...] = ("clone",)  # ttscore.contract.moss_tts_nano.voicefile.PROFILE_MODES
    voice_help: str = f"{rules.DISPLAY}: clone (the reference codes; no transcript, --ref-text is ignored)"

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


    def precompute_voice(self, artifacts: Path, options: VoiceFileOptions, progress: Progress
                         ) -> tuple[dict[str, Any], str]:
        o = options
        check_voice_mode(o.mode, self.voice_modes, rules.DISPLAY)
        progress(1, 1, f"encoding the reference with {artifacts.name}'s moss_codec_encoder and writing the voice file")
        entry = precompute_voice(artifacts, o.voice_name, o.ref_audio, o.output_dir, o.speaker_description)
        return entry, f"{rules.DISPLAY} clone, codes [{entry['ref_code_length']}, {entry['num_codebooks']}]"


OFFLINE = MossOffline()
