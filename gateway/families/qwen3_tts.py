"""The Qwen3-TTS 12 Hz family's gateway adapter (gateway.family.FamilyAdapter).

Three tasks, one per checkpoint variant: CustomVoice (preset speakers), VoiceDesign (a voice from
`instructions`), Base (cloning from `ref_audio` or a stored voice: the x-vector, plus the reference
codes for in-context cloning with the transcript `ref_text`). Requests without `model` are routed
among the served Qwen3-TTS checkpoints by task (spec, "task_type"): a stored voice always selects
Base; otherwise `ref_audio` or `ref_text` selects Base when `task_type` is omitted; anything else is
CustomVoice; VoiceDesign only when asked for. The checkpoint is then the one `model` names (it must
serve that task) or the first served checkpoint of that task (CustomVoice: the one that has the voice).

`extra_params` `temperature` (0: greedy), `top_k`, `top_p` reach the talker's sampling (code 0) only, as
vLLM-Omni 0.30.0 applies them; the code predictor keeps the checkpoint's subtalker settings.

Reference features: (x_vector [D] float32, ref_codes [T, 16] int64 or None) from the checkpoint's
voice_features ensemble (inputs `audio`, `sample_rate`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ttscore.contract import families, qwen3_tts
from ttscore.contract import tensors as triton_io
from ttscore.contract.errors import InvalidRequest
from ttscore.contract.voicefile import MODES, REF_CODE, SPEAKER_EMBEDDING

from ..backend import InferenceBackend
from ..errors import bad_request, from_invalid_request
from ..family import FeatureEnv, PlanContext, ServedCheckpoint, SpeechPlan, audio_key
from ..family_kit import BaseAdapter, encode_clip, segments_of
from ..speech_fields import (
    MAX_INSTRUCTIONS_CHARS,
    MAX_REF_TEXT_CHARS,
    SpeechFields,
    StoredVoice,
    plan_output,
    task_mismatch,
    text_field,
)
from ..voices.features import VoiceFeatures
from ..voices.precomputed import PrecomputedVoice, SkipVoice, description, read_entry

Features = tuple[np.ndarray, "np.ndarray | None"]  # (x_vector, ref_codes)

# OpenAI's voices -> CustomVoice presets, matched by their published descriptions (gender, register,
# character); `alloy`, OpenAI's usual default, lands on the family's default voice (gateway.aliases).
VOICE_ALIASES: dict[str, str] = {
    "alloy": "vivian",  # neutral, the default voice  -> the server's default voice
    "ash": "dylan",  # young male                     -> youthful male
    "ballad": "eric",  # expressive male               -> lively male
    "cedar": "aiden",  # natural male                  -> clear American male
    "coral": "sohee",  # warm female                   -> warm female
    "echo": "ryan",  # male                            -> dynamic English male
    "fable": "aiden",  # expressive narrator (male)    -> clear American male
    "marin": "vivian",  # bright female                -> bright young female
    "nova": "ono_anna",  # young, energetic female     -> playful young female
    "onyx": "uncle_fu",  # deep male                   -> low, mellow male
    "sage": "serena",  # calm female                   -> gentle female
    "shimmer": "serena",  # soft, warm female          -> warm, gentle female
    "verse": "ryan",  # versatile male                 -> dynamic male
}


async def voice_features(backend: InferenceBackend, model: str, audio: np.ndarray, sample_rate: int,
                         request_id: str) -> tuple[np.ndarray, np.ndarray]:
    """(x_vector [D] float32, ref_codes [T, groups] int64) of a clip through a voice_features ensemble."""
    x_vector, ref_codes = await encode_clip(backend, model, audio, sample_rate, request_id, ["x_vector", "ref_codes"])
    return x_vector.astype(np.float32).reshape(-1), ref_codes.astype(np.int64)


def _title(language: str) -> str:
    return "Auto" if language == "auto" else language.title()


class Qwen3TTSAdapter(BaseAdapter):
    family = qwen3_tts.FAMILY
    rules = qwen3_tts.RULES
    routes_by_task = True
    default_task = "CustomVoice"
    # Uploaded voices: x-vector and codes computed by the voice store at upload, kept in its FeatureCache.
    caches_voice_features = True
    clones_voices = True
    voice_aliases = VOICE_ALIASES

    # --- planning ----------------------------------------------------------------------------------

    def _route(self, task: str, voice: str | None, named: ServedCheckpoint | None,
               deployment: PlanContext) -> ServedCheckpoint:
        if named is not None:
            if named.task != task:
                raise task_mismatch([named.task], task, self.rules.name)
            return named
        routed = [c for c in deployment.routed_by_task() if c.family == self.family]
        candidates = [c for c in routed if c.task == task]
        if not candidates:
            raise task_mismatch([c.task for c in routed], task, self.rules.name)
        if task == "CustomVoice" and voice is not None:
            for c in candidates:
                if voice in c.speakers:
                    return c
        return candidates[0]

    def plan(self, f: SpeechFields, named: ServedCheckpoint | None, text: str, deployment: PlanContext) -> SpeechPlan:
        rules = self.rules
        if f.task_type is not None and f.task_type not in rules.tasks:
            raise bad_request(f"Invalid task_type '{f.task_type}'. Supported: {', '.join(rules.tasks)}", "task_type")
        voice = text_field(f.voice, "voice", 256)
        voice = voice.strip().lower() if voice is not None else None
        voice = voice or None
        instructions = text_field(f.instructions, "instructions", MAX_INSTRUCTIONS_CHARS)
        ref_text = text_field(f.ref_text, "ref_text", MAX_REF_TEXT_CHARS)
        ref_audio = text_field(f.ref_audio, "ref_audio", 1 << 30)
        x_vector_only = f.x_vector_only_mode
        non_streaming_mode = f.non_streaming_mode

        # Task inference (spec): a stored voice always means Base; ref_audio / ref_text infer Base.
        stored = deployment.resolve_voice(voice) if voice is not None else None
        if stored is not None and stored.family not in (None, self.family):
            made = families.display_name(stored.family)
            raise bad_request(f"Voice '{stored.name}' is a precomputed {made} voice: it cannot be used with "
                              f"{rules.name} models (name a {made} model)", "voice")
        if stored is None and voice is not None:
            voice = deployment.preset_voice(voice)  # an OpenAI voice name -> its preset speaker
        if stored is not None or (f.task_type is None and (ref_audio is not None or ref_text is not None)):
            task = "Base"
        else:
            task = f.task_type or "CustomVoice"

        ckpt = self._route(task, voice, named, deployment)
        output = plan_output(f, ckpt.sample_rate)

        language = "auto"
        if f.language is not None:
            lang = text_field(f.language, "language", 64) or ""
            language = lang.strip().lower()
            if language not in ckpt.languages:
                raise bad_request(
                    f"Invalid language '{f.language}'. Supported: "
                    f"{', '.join(sorted(_title(x) for x in ckpt.languages))}",
                    "language",
                )

        speaker: str | None = None
        if task == "CustomVoice":
            default = rules.default_voice
            speaker = voice or (default if default in ckpt.speakers else ckpt.speakers[0])
            if speaker not in ckpt.speakers:
                raise bad_request(f"Invalid voice '{f.voice}'. Supported: {', '.join(ckpt.speakers)}", "voice")

        try:
            # Cross-field rules: cloning inputs only make sense for Base (only reachable with an
            # explicit task_type, since they infer Base otherwise); each task's required fields.
            rules.check_task_fields(task, {
                "ref_audio": ref_audio, "ref_text": ref_text, "x_vector_only_mode": x_vector_only or None,
                "instructions": instructions,
            })
            max_new = rules.field("max_new_tokens").resolve(f.max_new_tokens)
            initial = rules.field("initial_codec_chunk_frames").check(f.initial_codec_chunk_frames)
            seed = rules.field("seed").check(f.seed)
        except InvalidRequest as exc:
            raise from_invalid_request(exc) from None

        if task == "Base":
            if stored is None and ref_audio is None:
                raise bad_request("Base task requires 'ref_audio' (or an uploaded voice) for voice cloning",
                                  "ref_audio")
            if stored is not None and ref_audio is None:
                ref_text = ref_text if ref_text is not None else stored.ref_text
                if not (ref_text or "").strip():
                    x_vector_only = True  # uploaded without a transcript: speaker embedding only (spec)
            if not x_vector_only:
                if not (ref_text or "").strip():
                    raise bad_request(
                        "Base task requires non-empty 'ref_text' (transcript of the reference audio) "
                        "unless 'x_vector_only_mode' is enabled",
                        "ref_text",
                    )
            else:
                ref_text = None  # x-vector-only cloning takes no transcript
            if ref_audio is not None:
                stored = None  # inline ref_audio overrides an uploaded voice (spec)

        return SpeechPlan(
            checkpoint=ckpt,
            task=task,
            text=text,
            speaker=speaker,
            language=language,
            instructions=instructions if instructions and instructions.strip() else None,  # as given (qwen-tts)
            ref_audio=ref_audio if task == "Base" else None,
            ref_text=ref_text if task == "Base" else None,
            x_vector_only=bool(x_vector_only) if task == "Base" else False,
            stored_voice=stored if task == "Base" else None,
            non_streaming_mode=non_streaming_mode,
            max_new_tokens=max_new,
            seed=seed,
            initial_chunk_frames=initial,
            output=output,
            segments=segments_of(text, deployment),
            knobs=rules.knobs(f.extra_params),
        )

    # --- generation --------------------------------------------------------------------------------

    def takes_open_text(self, plan: SpeechPlan) -> bool:
        """Incremental text (gateway.family.takes_open_text): the streaming prompt mode takes one
        text token per frame, except with an in-context reference (its text leads the prompt) or
        non_streaming_mode asked for."""
        in_context = plan.task == "Base" and not plan.x_vector_only
        return not in_context and plan.non_streaming_mode is not True

    async def reference_features(self, plan: SpeechPlan, env: FeatureEnv) -> Features:
        """From the stored voice (an upload's cached computation, or a precomputed x-vector and
        codes), else `ref_audio` (or the stored clip) through the checkpoint's voice_features."""
        stored = plan.stored_voice
        if stored is not None and stored.features is not None:
            features: Features = await stored.features(plan.x_vector_only)
            return features
        if stored is not None and stored.precomputed is not None:
            x_vector, ref_codes = stored.precomputed
            if plan.x_vector_only or ref_codes is not None:
                return x_vector, ref_codes
            if stored.audio is None:
                raise InvalidRequest(
                    f"Voice '{stored.name}' has no reference codes (precomputed with --mode xvec): omit ref_text "
                    "or set x_vector_only_mode", "ref_text")
        if stored is not None and stored.audio is not None and stored.sample_rate:
            audio, rate = stored.audio, int(stored.sample_rate)
        else:
            if plan.ref_audio is None:
                raise InvalidRequest("Base task requires 'ref_audio' for voice cloning", "ref_audio")
            audio, rate = await env.ref_audio(plan.ref_audio, self.rules.ref_audio)
        model = plan.checkpoint.voice_features_model
        if not model:
            raise InvalidRequest(f"model `{plan.checkpoint.name}` cannot clone voices", "ref_audio")
        # Concurrent requests with one clip (a batch's items) share the single computation.
        result: Features = await env.shared(
            audio_key(model, audio, rate),
            lambda: voice_features(env.backend, model, audio, rate, env.request_id))
        return result

    def generation_fields(self, plan: SpeechPlan, segment: int) -> dict[str, Any]:
        return {
            **super().generation_fields(plan, segment),
            "task_type": qwen3_tts.VARIANT_OF_TASK[plan.task],
            "speaker": plan.speaker,
            "language": plan.language,
            "x_vector_only": True if plan.task == "Base" and plan.x_vector_only else None,
            "non_streaming_mode": plan.non_streaming_mode,
        }

    def knob_fields(self, knobs: Mapping[str, int | float]) -> dict[str, Any]:
        return qwen3_tts.talker_sampling(knobs)  # the talker's sampling inputs (temperature 0: greedy)

    def generation_inputs(self, plan: SpeechPlan, segment: int, features: Any) -> dict[str, np.ndarray]:
        fields = self.generation_fields(plan, segment)
        if self.needs_reference(plan):
            assert features is not None
            x_vector, ref_codes = features
            fields["x_vector"] = x_vector
            if not plan.x_vector_only:
                fields["ref_codes"] = ref_codes
        return triton_io.request_tensors(**fields)

    # --- voices ------------------------------------------------------------------------------------

    async def clip_features(self, backend: InferenceBackend, model: str, audio: np.ndarray, rate: int,
                            prompt: bool, request_id: str) -> tuple[np.ndarray, np.ndarray]:
        """An uploaded clip's features (`prompt` aside: the ensemble always computes both)."""
        return await voice_features(backend, model, audio, rate, request_id)

    def precomputed_checks(self, checkpoints: Sequence[ServedCheckpoint]) -> dict[str, Any]:
        """The served Base checkpoint's x-vector size and code groups (voices of another model size fail)."""
        base = next((c for c in checkpoints if c.family == self.family and c.task == "Base"), None)
        if base is None:
            return {}
        return {"embedding_dim": base.speaker_embed_dim, "num_code_groups": base.num_code_groups}

    def precomputed_voice(self, root: Path, raw_name: Any, entry: Any, embedding_dim: int | None = None,
                          num_code_groups: int | None = None) -> PrecomputedVoice:
        """A profile: `speaker_embedding` [D] (mode "xvec"), + `ref_code` [T, groups] and its
        `ref_text` (mode "icl")."""
        name, mode, path, tensors = read_entry(root, raw_name, entry, MODES, "xvec")
        emb = tensors.get(SPEAKER_EMBEDDING)
        if emb is None:
            raise SkipVoice(f"missing tensor {SPEAKER_EMBEDDING!r}")
        vector_like = emb.ndim >= 1 and emb.size == max(emb.shape)  # [D], or [1, D] and the like
        if emb.dtype.kind != "f" or emb.size == 0 or not vector_like:
            raise SkipVoice(f"{SPEAKER_EMBEDDING} must be a non-empty float vector, got {emb.dtype} {list(emb.shape)}")
        x_vector = emb.reshape(-1).astype(np.float32)
        if not np.all(np.isfinite(x_vector)):
            raise SkipVoice(f"{SPEAKER_EMBEDDING} has non-finite values")
        if embedding_dim is not None and x_vector.shape[0] != embedding_dim:
            raise SkipVoice(f"{SPEAKER_EMBEDDING} dim {x_vector.shape[0]}, the served model expects {embedding_dim}")
        ref_text = entry.get("ref_text")
        ref_text = ref_text.strip() or None if isinstance(ref_text, str) else None
        ref_codes = None
        if mode == "icl":
            codes = tensors.get(REF_CODE)
            if codes is None:
                raise SkipVoice(f"mode 'icl' needs tensor {REF_CODE!r}")
            if codes.dtype.kind not in "iu" or codes.ndim != 2 or codes.shape[0] == 0:
                raise SkipVoice(
                    f"{REF_CODE} must be a non-empty integer [T, groups] tensor, got {codes.dtype} {list(codes.shape)}")
            if num_code_groups is not None and codes.shape[1] != num_code_groups:
                raise SkipVoice(f"{REF_CODE} has {codes.shape[1]} code groups, the served model uses {num_code_groups}")
            if codes.min() < 0:
                raise SkipVoice(f"{REF_CODE} has negative codes")
            if ref_text is None:
                raise SkipVoice("mode 'icl' needs 'ref_text' (the transcript of the reference codes)")
            ref_codes = codes.astype(np.int64)
        return PrecomputedVoice(
            name=name,
            mode=mode,
            features=VoiceFeatures.from_result((x_vector, ref_codes), with_codes=mode == "icl"),
            path=path,
            ref_text=ref_text,
            speaker_description=description(entry),
            model_type=self.family,
        )

    def stored_voice(self, voice: PrecomputedVoice) -> StoredVoice:
        assert voice.features is not None
        return StoredVoice(
            voice.name,
            ref_text=voice.ref_text if voice.mode == "icl" else None,
            precomputed=(voice.features.x_vector, voice.features.ref_codes),
            family=voice.model_type,
        )


ADAPTER = Qwen3TTSAdapter()
