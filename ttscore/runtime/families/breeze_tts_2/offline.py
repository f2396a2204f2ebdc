"""What the offline tools ask of Breeze-TTS-2 (ttscore.runtime.family.OfflineTools): `say`'s request
(plain, design, clone, direction) and voice files (precompute-voice: the reference clip's codes and
its transcript, ttscore.contract.breeze_tts_2.voicefile)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ttscore.contract.errors import InvalidRequest
from ttscore.runtime.family import Progress, SayJob, SayOptions, VoiceFileOptions, read_reference


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
    from ttscore.contract.manifest import read_manifest
    from ttscore.contract.voicefile import validate_voice_name
    from ttscore.runtime.families.breeze_tts_2.model import encode_reference
    from ttscore.runtime.onnx import OnnxGraph

    name = validate_voice_name(voice_name, "voice_name")
    if not (ref_text or "").strip():
        raise InvalidRequest("a Breeze-TTS-2 voice needs the transcript of the reference audio (--ref-text)",
                             "ref_text")
    root = Path(artifacts)
    manifest = read_manifest(root)
    if manifest.family != spec.FAMILY:
        raise InvalidRequest(f"{root} is a {manifest.family} export, not Breeze-TTS-2", "checkpoint")
    graph = manifest.graphs.get("speech_encoder")
    if graph is None:
        raise InvalidRequest(f"{root}/manifest.json lists no speech_encoder graph: re-export", "checkpoint")
    audio, sr = read_reference(ref_audio_path)
    codes = encode_reference(OnnxGraph(root / graph["file"], dict(graph), None), audio, sr)
    source = Path(str((manifest.raw.get("source") or {}).get("path") or root))
    return write_breeze_tts_2_profile(
        output_dir, name, ref_codes=codes, ref_text=ref_text,
        checkpoint={"name": source.name, CODEC_SHA256: manifest.source_sha256(CODEC_WEIGHTS)},
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
        o = options
        if o.mode not in (None, *self.voice_modes):
            raise InvalidRequest(f"mode must be one of {', '.join(self.voice_modes)} for Breeze-TTS-2, got {o.mode!r}",
                                 "mode")
        progress(1, 1, f"encoding the reference with {artifacts.name}'s speech encoder and writing the voice file")
        entry = precompute_voice(artifacts, o.voice_name, o.ref_audio, o.ref_text, o.output_dir,
                                 o.speaker_description)
        return entry, f"Breeze-TTS-2 clone, codes [{entry['ref_code_length']}, {entry['num_codebooks']}]"


OFFLINE = BreezeOffline()
