"""The VoxCPM2 family's side of the contract: fixed facts, exported graphs and request rules.

VoxCPM2 generates continuous latent patches (no codec tokens): per step the base LM and the
residual LM each advance one position, the LocDiT turns their hidden states into one patch of
`patch_size` AudioVAE latent frames by flow matching (Euler solver, classifier-free guidance), and
the local encoder feeds the patch back. The AudioVAE decodes latents to 48 kHz audio (encodes
reference audio at 16 kHz). The engine's "frame" is one patch: [patch_size, feat_dim] float32.
export/voxcpm2/README.md has the whole design.
"""

from __future__ import annotations

from ttscore.contract import kv, wire
from ttscore.contract.graphs import GraphSpec, TensorSpec, streaming_vocoder_spec
from ttscore.contract.rules import SEEDED, FamilyRules, FieldRule, RefAudioBounds, seed_field

FAMILY = "voxcpm2"
# The export format the runtime reads (the manifest's `export_revision`; export/voxcpm2/family.py writes it):
# 2: the LM step graphs cut the past to the mask inside (GraphSpec.past_cut_to_mask).
EXPORT_REVISION = 2

SAMPLE_RATE = 48000  # AudioVAE decoder output
ENCODE_SAMPLE_RATE = 16000  # AudioVAE encoder input (reference audio is resampled to it)

# Token ids hard-wired in the reference model (no config carries them).
AUDIO_START_ID = 101
AUDIO_END_ID = 102
REF_AUDIO_START_ID = 103
REF_AUDIO_END_ID = 104

# Generation defaults of the reference `generate` (voxcpm 2.0.3).
DEFAULT_INFERENCE_TIMESTEPS = 10
DEFAULT_CFG_VALUE = 2.0
MIN_LEN = 2  # the stop head is only obeyed after this many patches (`i > min_len`)
DEFAULT_MAX_LEN = 2000  # patches
# The reference caps a generation at int(target_text_tokens * ratio + 10) patches.
LENGTH_RATIO = 6.0
STREAMING_PREFIX_LEN = 4  # continuation modes: the last (this - 1) prompt patches prime the decoder

# Server bounds of the per-request knobs.
MAX_NEW_TOKENS_LIMIT = 4096  # patches (one patch = patch_size latent frames, 160 ms at the real size)
MAX_CHUNK_FRAMES = 100
DEFAULT_CHUNK_FRAMES = 4
DEFAULT_INITIAL_CHUNK_FRAMES = 1
MAX_INFERENCE_TIMESTEPS = 100
MAX_TEXT_CHARS = 4096
# A request without a seed: vLLM-Omni 0.30.0's deploy file pins 42 (deploy/voxcpm2.yaml), so the same
# request gives the same audio by default (the Speech API's rule 1: what a client observes).
DEFAULT_SEED = 42

# Prompt modes (the reference's build_prompt_cache modes, plus zero-shot).
MODES = ("zero_shot", "reference", "continuation", "ref_continuation")

# Precomputed voices (ttscore.contract.voicefile): the prompt modes a profile can store, and what
# ties its latent patches to a checkpoint (the AudioVAE that encoded them: its patch shape and the
# checksum of the checkpoint's audiovae.safetensors).
PROFILE_MODES = ("reference", "continuation", "ref_continuation")
AUDIOVAE_FILE = "audiovae.safetensors"
# A profile's tensors: the isolated reference (right-padded) and the continuation prompt (left-padded).
REF_PATCHES = "ref_patches"
PROMPT_PATCHES = "prompt_patches"


def patch_shape(config: dict[str, object]) -> tuple[int, int]:
    """(patch_size, feat_dim) of a VoxCPM2 config.json (the reference's defaults 4 and 64)."""
    p, d = config.get("patch_size", 4), config.get("feat_dim", 64)
    return int(p) if isinstance(p, int) else 4, int(d) if isinstance(d, int) else 64


# The Speech API's view: one task (cloning-capable TTS); the zero-shot voice when no reference.
TASK = "Base"
# Speech API fields this family does not take (a request giving one is refused naming it).
# `language` "Auto" (the spec's default, meaning no language) is accepted.
UNSUPPORTED_FIELDS = ("instructions", "language", "x_vector_only_mode", "speaker_embedding", "non_streaming_mode")
# `voice` for the model's own zero-shot voice (like omitting it; the openai SDK always sends one).
ZERO_SHOT_VOICE = "default"
# Reference clips (resampled to ENCODE_SAMPLE_RATE by the AudioVAE encoder's front end).
REF_AUDIO = RefAudioBounds(min_rate=8000, max_rate=192000, min_seconds=0.1, max_seconds=60.0)
RULES = FamilyRules(
    family=FAMILY,
    sampling=SEEDED,  # each patch's diffusion noise from the request's default_rng(seed)
    tasks=(TASK,),
    fields=(
        FieldRule("max_new_tokens", 1, MAX_NEW_TOKENS_LIMIT, None),  # None: the reference's length cap
        FieldRule("initial_codec_chunk_frames", 1, MAX_CHUNK_FRAMES, DEFAULT_INITIAL_CHUNK_FRAMES),
        FieldRule("codec_chunk_frames", 1, MAX_CHUNK_FRAMES, DEFAULT_CHUNK_FRAMES),
        seed_field(DEFAULT_SEED),
        FieldRule("inference_timesteps", 1, MAX_INFERENCE_TIMESTEPS, DEFAULT_INFERENCE_TIMESTEPS),
    ),
    display_name="VoxCPM2",
    unsupported=UNSUPPORTED_FIELDS,
    ref_audio=REF_AUDIO,
    max_text_chars=MAX_TEXT_CHARS,
    sample_rate=SAMPLE_RATE,
)


# --- graphs -------------------------------------------------------------------------------------
# Both LMs: one graph serves prefill (T = chunk) and decode (T = 1). `attention_mask` [B, P + T]
# marks valid past slots (1) and padding (0); the T new positions are valid and causal among
# themselves. Outputs: the new positions' final hidden states and their K/V (post-RoPE). Both cut
# their past to the mask's P inside (`past_cut_to_mask`, ttscore.contract.kv), so a past longer
# than P (the arena's rows in place) gives the bits of a past of exactly P.


lm_past_key, lm_past_value, lm_new_key, lm_new_value = kv.past_key, kv.past_value, kv.new_key, kv.new_value


def lm_spec(name: str, layers: int, hidden: int, kv_heads: int, head_dim: int, rope: bool = True) -> GraphSpec:
    """`position_ids` only where the stack has RoPE (the released residual LM has none)."""
    past = kv.kv_specs(layers, kv_heads, head_dim, new=False)
    new = kv.kv_specs(layers, kv_heads, head_dim, new=True)
    return GraphSpec(
        name,
        (
            TensorSpec("inputs_embeds", "float32", ("batch", "tokens", hidden)),
            TensorSpec("attention_mask", "int64", ("batch", "total")),
            *((TensorSpec("position_ids", "int64", ("batch", "tokens")),) if rope else ()),
            *past,
        ),
        (TensorSpec("hidden", "float32", ("batch", "tokens", hidden)), *new),
        past_cut_to_mask=True,
    )


def local_encoder_spec(patch: int, feat_dim: int, hidden: int) -> GraphSpec:
    """Patches -> LM input embeddings (local encoder + enc_to_lm_proj)."""
    return GraphSpec(
        "local_encoder",
        (TensorSpec("feats", "float32", ("n", patch, feat_dim)),),
        (TensorSpec("embeds", "float32", ("n", hidden)),),
    )


def bridge_spec(hidden: int) -> GraphSpec:
    """Base LM output -> (lm_hidden, residual LM input): scalar quantization on audio positions,
    then fusion_concat_proj([lm_hidden, audio embed or 0])."""
    return GraphSpec(
        "bridge",
        (
            TensorSpec("lm_out", "float32", ("n", hidden)),
            TensorSpec("feat_embeds", "float32", ("n", hidden)),
            TensorSpec("audio_mask", "bool", ("n",)),
        ),
        (TensorSpec("lm_hidden", "float32", ("n", hidden)), TensorSpec("residual_input", "float32", ("n", hidden))),
    )


def heads_spec(hidden: int, dit_hidden: int) -> GraphSpec:
    """Per patch: the LocDiT condition mu = [lm_to_dit(lm_hidden), res_to_dit(residual_hidden)] and
    the stop head's logits over {continue, stop}."""
    return GraphSpec(
        "heads",
        (
            TensorSpec("lm_hidden", "float32", ("batch", hidden)),
            TensorSpec("residual_hidden", "float32", ("batch", hidden)),
        ),
        (TensorSpec("mu", "float32", ("batch", 2 * dit_hidden)), TensorSpec("stop_logits", "float32", ("batch", 2))),
    )


def locdit_spec(patch: int, feat_dim: int, dit_hidden: int) -> GraphSpec:
    """One Euler step's velocity with classifier-free guidance (CFG-zero*: the unconditional branch
    is the same estimator with mu = 0, scaled by the optimal projection): the caller integrates
    x <- x - dt * velocity. Per-row t, dt and cfg_value, so rows at different solver steps batch."""
    return GraphSpec(
        "locdit_step",
        (
            TensorSpec("x", "float32", ("batch", feat_dim, patch)),
            TensorSpec("mu", "float32", ("batch", 2 * dit_hidden)),
            TensorSpec("cond", "float32", ("batch", feat_dim, patch)),
            TensorSpec("t", "float32", ("batch",)),
            TensorSpec("dt", "float32", ("batch",)),
            TensorSpec("cfg_value", "float32", ("batch",)),
        ),
        (TensorSpec("velocity", "float32", ("batch", feat_dim, patch)),),
    )


def vae_encoder_spec(feat_dim: int) -> GraphSpec:
    """16 kHz mono audio (length a multiple of 640 samples) -> latent frames (the encoder's mean)."""
    return GraphSpec(
        "vae_encoder",
        (TensorSpec("audio", "float32", ("batch", "samples")),),
        (TensorSpec("latents", "float32", ("batch", feat_dim, "frames")),),
    )


def vae_decoder_spec(feat_dim: int, state_size: int) -> GraphSpec:
    """Exact streaming AudioVAE decoder: (latent frames, state) -> (48 kHz PCM, new state). The
    decoder is strictly causal, so with the state (causal-conv histories, one input frame per
    transposed conv) any chunking reproduces the whole-utterance decode."""
    return streaming_vocoder_spec(
        "vae_decoder_stream", TensorSpec("latents", "float32", ("batch", feat_dim, "frames")), state_size
    )


GRAPH_NAMES = ("base_lm", "residual_lm", "local_encoder", "bridge", "heads", "locdit_step", "vae_encoder",
               "vae_decoder_stream")


# --- wire: speech_generation inputs and the audiovae_encoder model (ttscore.contract.tensors) -----

_VOXCPM2_SPEECH_INPUTS: tuple[wire.TensorIO, ...] = (
    wire.TEXT,
    wire.string_input("ref_text", "Transcript of the continuation prompt (prompt_patches, or ref_patches alone)."),
    wire.TensorIO("ref_patches", "FP32", (-1, -1, -1), True, "Reference latent patches [T, P, D] from audiovae_encoder."),
    wire.TensorIO("prompt_patches", "FP32", (-1, -1, -1), True,
                  "Continuation prompt patches [T, P, D] (audiovae_encoder with prompt=true) that ref_text "
                  "transcribes; with ref_patches: the reference's ref_continuation mode."),
    wire.MAX_NEW_TOKENS,
    wire.SEED,
    wire.TensorIO("inference_timesteps", "INT32", (1,), True, "Flow-matching solver steps per patch."),
    wire.INITIAL_CHUNK_FRAMES,
    wire.CHUNK_FRAMES,
)
AUDIOVAE_ENCODER = "audiovae_encoder"  # the family's voice features (one per served checkpoint)
AUDIOVAE_ENCODER_INPUTS: tuple[wire.TensorIO, ...] = (
    *wire.clip_inputs("Its sample rate (resampled to 16 kHz)."),
    wire.TensorIO("prompt", "BOOL", (1,), True,
                  "True: a continuation prompt (the request also sends ref_text), zero-padded on the left; "
                  "false/absent: a cloning reference, padded on the right."),
)
AUDIOVAE_ENCODER_OUTPUTS: tuple[wire.TensorIO, ...] = (
    wire.TensorIO("ref_patches", "FP32", (-1, -1, -1), doc="Latent patches [T, P, D] for speech_generation's ref_patches."),
)
WIRE = wire.FamilyWire(FAMILY, _VOXCPM2_SPEECH_INPUTS, {AUDIOVAE_ENCODER: (AUDIOVAE_ENCODER_INPUTS, AUDIOVAE_ENCODER_OUTPUTS)})
