"""The MOSS-TTS-Nano family's gateway adapter (gateway.family.FamilyAdapter).

Answered only when `model` names a MOSS-TTS-Nano checkpoint (or when only it is served). Voice cloning only,
as the spec's row and vLLM-Omni 0.30.0's `MossTTSNanoAdapter` (tts_adapters/moss_tts.py, nano path) serve it:

- `ref_audio` (required unless `voice` names an uploaded voice; without either a 400 naming `ref_audio`, in
  vLLM-Omni's words): the clip's codec codes [frames, 16] through the checkpoint's moss_codec_encoder, which
  mixes it to mono (the gateway's clip reader), resamples it to 48 kHz and repeats it to the codec's two
  channels, as upstream does (shared by concurrent and recent requests);
- `ref_text`: accepted and ignored (upstream's voice_clone mode takes no transcript; vLLM-Omni drops it too);
- `voice`: omitted or "default" (the reference's voice), an uploaded voice (its codes computed once at upload
  through each served checkpoint's moss_codec_encoder) or a precomputed one (`triton-tts precompute-voice`: its
  `ref_code` [frames, 16], ttscore.contract.moss_tts_nano.voicefile, served by the checkpoints whose codec made
  it: the manifest's `codec.sha256`); `ref_audio` overrides it; there are no preset voices, so any other name
  is a 400 naming `voice`;
- output 48 kHz mono (the codec's stereo by the mean, as vLLM-Omni's `_to_mono_1d`); `response_format`,
  `sample_rate`, `stream`, `stream_format` and `speed` by the shared output rules (vLLM-Omni refuses any
  `sample_rate`; the project resamples, as for every family);
- `max_new_tokens` (frames of 80 ms, 1..4096, default 375), `seed` (default 42, vLLM-Omni's deploy file);
- `extra_params`: `do_sample` (false: greedy), `text_temperature`, `text_top_p`, `text_top_k`,
  `audio_temperature`, `audio_top_p`, `audio_top_k`, `audio_repetition_penalty` (vLLM-Omni always samples at
  their defaults), each checked (contract KNOBS), any other key a 400 naming `extra_params`.
Refused, each with a 400 naming the field: the family's unsupported fields (contract RULES:
`speaker_embedding`, `instructions`, `language`, `task_type`, `x_vector_only_mode`, `non_streaming_mode`,
`initial_codec_chunk_frames`; `word_timestamps` is the gateway's: gateway.word_timing), a clip the encoder refuses (`ref_audio`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ttscore.contract import moss_tts_nano
from ttscore.contract.manifest import Manifest
from ttscore.contract.moss_tts_nano import rules as nano
from ttscore.contract.moss_tts_nano.voicefile import CODEC_SHA256, PROFILE_MODES, manifest_codec_sha256

from ..family import PlanContext, ServedCheckpoint, SpeechPlan
from ..family_kit import CodecFacts, CodecVoicesAdapter, clone_reference, requested_voice
from ..speech_fields import SpeechFields


class MossTTSNanoAdapter(CodecVoicesAdapter):
    family = moss_tts_nano.FAMILY
    rules = moss_tts_nano.RULES
    default_task = nano.TASK
    # Uploaded voices: codes computed at upload through every served checkpoint's moss_codec_encoder.
    clones_voices = True
    reference_input = nano.REF_AUDIO_TOKENS.name  # [frames, 16] int64 (moss_codec_encoder's output), always given
    # Precomputed voices: the codes of a served checkpoint's codec (checked by its checksum).
    voice_modes = PROFILE_MODES
    codec_identity_key = CODEC_SHA256
    code_grid = (moss_tts_nano.NUM_QUANTIZERS, moss_tts_nano.CODEBOOK_SIZE)

    def manifest_facts(self, manifest: Manifest) -> CodecFacts:
        return CodecFacts(codec_sha256=manifest_codec_sha256(dict(manifest.raw)))

    def plan_request(self, f: SpeechFields, ckpt: ServedCheckpoint, text: str, deployment: PlanContext
                     ) -> SpeechPlan:
        name = self.rules.name
        default = nano.DEFAULT_VOICE
        stored = requested_voice(f, ckpt, deployment, default,
                                 f"Unknown voice '{f.voice}'. {name} has no built-in speakers. Upload a voice "
                                 "first via POST /v1/audio/voices, or use ref_audio.", fits="codec")
        ref = clone_reference(f, stored, required=f"{name} requires 'ref_audio' (reference audio for voice "
                              "cloning) or an uploaded voice.")
        # ref_text is checked (clone_reference) and ignored: upstream's voice_clone prompt has no transcript.
        return self.new_plan(f, ckpt, text, deployment, ref_audio=ref.ref_audio, ref_text=None,
                             stored_voice=ref.stored)

    # --- voices ---------------------------------------------------------------------------------------


    def voice_transcript(self, entry: Mapping[str, Any]) -> str | None:
        return None  # the family's prompt takes no transcript


ADAPTER = MossTTSNanoAdapter()
