"""What the offline tools ask of Qwen3-TTS (ttscore.runtime.family.OfflineTools): `say`'s request
and `precompute-voice`'s voice file (Base: the speaker embedding, + reference codes for mode icl)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ttscore.contract.errors import InvalidRequest
from ttscore.contract.voicefile import MODES, validate_voice_name, write_voice_profile
from ttscore.runtime.family import Progress, SayJob, SayOptions, VoiceFileOptions, read_reference

if TYPE_CHECKING:
    from ttscore.runtime.families.qwen3_tts.model import Qwen3TTSPipeline

logger = logging.getLogger(__name__)


def precompute_voice(
    pipeline: Qwen3TTSPipeline,
    voice_name: str,
    ref_audio_path: str | Path,
    ref_text: str | None = None,
    mode: str = "xvec",
    output_dir: str | Path = ".",
    speaker_description: str | None = None,
) -> dict[str, Any]:
    """Compute a voice's features offline with `pipeline` (a Base checkpoint) and write them.

    mode "xvec": speaker embedding only; "icl": embedding + reference codes + transcript (in-context
    cloning, higher quality). Returns the manifest entry that was written.
    """
    name = validate_voice_name(voice_name, "voice_name")
    if mode not in MODES:
        raise InvalidRequest(f"mode must be one of {', '.join(MODES)}, got {mode!r}", "mode")
    if mode == "icl" and not (ref_text or "").strip():
        raise InvalidRequest("mode 'icl' needs the reference transcript (--ref-text)", "ref_text")
    audio, sr = read_reference(ref_audio_path)
    x_vector, ref_codes = pipeline.voice_features(audio, sr, with_codes=mode == "icl")
    entry = write_voice_profile(
        output_dir, name, x_vector, ref_codes, mode=mode, ref_text=ref_text, speaker_description=speaker_description
    )
    logger.info("precomputed voice %r (%s, dim %d) into %s", name, mode, entry["embedding_dim"], output_dir)
    return entry


class Qwen3TTSOffline:
    voice_modes: tuple[str, ...] = MODES
    voice_help: str = "Qwen3-TTS Base: xvec (default; speaker embedding only) or icl (+ reference codes, in-context cloning)"

    def say(self, artifacts: Path, options: SayOptions) -> SayJob:
        from ttscore.runtime.families.qwen3_tts.model import Qwen3TTSPipeline
        from ttscore.runtime.families.qwen3_tts.request import Qwen3TTSRequest

        o = options
        pipe = Qwen3TTSPipeline.load(artifacts)
        ref_codes = x_vector = None
        if o.ref_audio:
            wav, sr = read_reference(o.ref_audio)
            x_vector, ref_codes = pipe.voice_features(wav, sr, with_codes=not o.x_vector_only)
        elif o.ref_text or o.x_vector_only:
            raise InvalidRequest("--ref-text/--x-vector-only need --ref-audio", "ref_audio")
        req = Qwen3TTSRequest(
            text=o.text,
            speaker=o.voice,
            language=o.language,
            instructions=o.instructions,
            ref_text=o.ref_text,
            ref_codes=ref_codes,
            x_vector=x_vector,
            x_vector_only=o.x_vector_only,
            seed=o.seed,
            max_new_tokens=o.max_new_tokens,
            non_streaming_mode=o.non_streaming_mode,
            do_sample=False if o.greedy else None,
            subtalker_do_sample=False if o.greedy else None,
        )
        if req.speaker is None and pipe.info.variant == "custom_voice":
            req.speaker = sorted(pipe.info.speakers)[0]
        return SayJob(pipe, req, pipe.info.sample_rate, "frames")

    def precompute_voice(
        self, artifacts: Path, options: VoiceFileOptions, progress: Progress
    ) -> tuple[dict[str, Any], str]:
        from ttscore.runtime.families.qwen3_tts.model import Qwen3TTSPipeline

        o = options
        mode = o.mode or "xvec"
        if mode not in MODES:
            raise InvalidRequest(f"--mode {mode} is not a Qwen3-TTS Base mode (it takes {', '.join(MODES)})", "mode")
        if mode == "icl" and not (o.ref_text or "").strip():
            raise InvalidRequest("--mode icl needs --ref-text", "ref_text")
        progress(1, 2, f"loading {artifacts.name}")
        pipeline = Qwen3TTSPipeline.load(artifacts)
        progress(2, 2, f"computing the voice features ({mode}) and writing the voice file")
        entry = precompute_voice(
            pipeline, o.voice_name, o.ref_audio, ref_text=o.ref_text, mode=mode, output_dir=o.output_dir,
            speaker_description=o.speaker_description,
        )
        return entry, f"{entry['mode']}, embedding dim {entry['embedding_dim']}"


OFFLINE = Qwen3TTSOffline()
