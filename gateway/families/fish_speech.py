"""The Fish Speech S2 Pro family's gateway adapter (gateway.family.FamilyAdapter).

Answered only when `model` names a Fish Speech checkpoint (or when only Fish Speech is served). The spec's
Fish Speech section: `voice` "default" (or omitted), `ref_audio` + `ref_text` for cloning, 44.1 kHz output;
where it is silent, vLLM-Omni 0.30.0's adapter (tts_adapters/fish_speech.py) and its serving code:

- `voice` omitted or "default": the model's own voice (the text-only prompt); an uploaded voice: its DAC codes
  computed once at upload through each served checkpoint's dac_encoder, and its stored transcript (vLLM-Omni
  applies an uploaded speaker's audio and text as `ref_audio`/`ref_text`); any other name is a 400 naming
  `voice` (no built-in speakers);
- `ref_audio` + `ref_text` (cloning; overrides an uploaded voice): the clip's codes through the checkpoint's
  dac_encoder (resampled to 44.1 kHz). Cloning without a transcript (`ref_audio`, or an uploaded voice stored
  without one, and no `ref_text`) is a 400 naming `ref_text` (vLLM-Omni: "Voice cloning requires 'ref_text'");
  `ref_text` without a clip is a 400 naming it (vLLM-Omni ignores it silently; the project refuses it, as for
  OmniVoice);
- output at 44.1 kHz: `response_format` and `sample_rate` by the shared rules (opus has no 44.1 kHz rate, so
  opus without a `sample_rate` Opus takes is a 400 naming `sample_rate`), streams pcm/wav/mp3/opus (raw and SSE), `speed`
  on whole clips only (the shared time-stretch; the model has no speed control);
- `max_new_tokens` (frames of 2048 samples, 1..4096, default 2048), `seed` (the request's own sampling noise;
  without one 42), `extra_params` `temperature` (0..10, default 0.8; 0: greedy), `top_k` (0..4097, default 30;
  0: off), `top_p` (0 < p <= 1, default 0.9) — vLLM-Omni applies exactly these three keys of extra_params to the
  sampling params (defaults: its deploy config).
Refused, each with a 400 naming the field: any other `extra_params` key (the planner) and the family's
unsupported fields (contract RULES: `speaker_embedding`, `instructions`, `language`, `task_type`,
`x_vector_only_mode`, `non_streaming_mode`, `initial_codec_chunk_frames`; `word_timestamps` is the gateway's: gateway.word_timing).
"""

from __future__ import annotations

from ttscore.contract import fish_speech

from ..errors import bad_request
from ..family import PlanContext, ServedCheckpoint, SpeechPlan
from ..family_kit import BaseAdapter, clone_reference, requested_voice
from ..speech_fields import SpeechFields


class FishSpeechAdapter(BaseAdapter):
    family = fish_speech.FAMILY
    rules = fish_speech.RULES
    default_task = fish_speech.TASK
    # Uploaded voices: codes computed at upload through every served checkpoint's dac_encoder.
    clones_voices = True  # each checkpoint has its dac_encoder (export/fish_speech/family.py)
    reference_input = "ref_dac_codes"  # [frames, 10] int64; without: the model's own voice
    clip_codes = True  # a clip's codes: its dac_encoder's output of that name

    def plan_request(self, f: SpeechFields, ckpt: ServedCheckpoint, text: str, deployment: PlanContext
                     ) -> SpeechPlan:
        default = fish_speech.DEFAULT_VOICE
        stored = requested_voice(f, ckpt, deployment, default, f"Invalid voice '{f.voice}' for {self.rules.name}: it "
                                 f"has no built-in speakers; omit 'voice' (or use '{default}'), use an uploaded "
                                 "voice, or clone with 'ref_audio' and 'ref_text'")
        ref = clone_reference(f, stored)
        if not ref.cloning and f.ref_text is not None:  # a blank one too
            raise bad_request("'ref_text' is the transcript of 'ref_audio': give 'ref_audio' too", "ref_text")
        if ref.cloning and ref.ref_text is None:
            raise bad_request("Voice cloning requires 'ref_text' (transcript of the reference audio)", "ref_text")
        return self.new_plan(f, ckpt, text, deployment, ref_audio=ref.ref_audio, ref_text=ref.ref_text,
                             stored_voice=ref.stored)


ADAPTER = FishSpeechAdapter()
