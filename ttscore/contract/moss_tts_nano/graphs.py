"""MOSS-TTS-Nano's language model: fixed facts, prompt token ids and the exported LM graphs.

The model (OpenMOSS-Team/MOSS-TTS-Nano, 0.1B) is a GPT-2-style global transformer (LayerNorm, gelu_new MLP,
interleaved RoPE, no absolute positions) over prompt rows `[text_or_slot_id, c_0 .. c_15]`, whose embedding is
`wte(col 0) + sum_k emb_k(c_k)` (codebook columns holding `audio_pad` add nothing), and, per frame, a one-layer
local transformer of the same shape over `[global_hidden, wte(slot), emb_0(c_0) .. emb_14(c_14)]` (17 positions,
RoPE from 0, causal). Heads are tied: the stop/continue decision reads `wte` rows (audio_assistant_slot,
audio_end) at local position 0, codebook c reads `emb_c` at local position c + 1. A frame whose decision is not the
slot ends the chunk; a generated row is `[audio_assistant_slot, c_0 .. c_15]`. The reference is
mlx-audio==0.6.2 (mlx_audio/tts/models/moss_tts_nano), which tests reach through tests/refenv.py.

Graphs (exported by export/moss_tts_nano):
- `global_step`: the global transformer over an explicit past (ttscore.contract.kv `step_spec`; the runtime steps it
  through the shared `KVArena`): `inputs_embeds` [B, T, D] (rows embedded by the runtime from the tables below, in
  the reference's order: wte, then codebooks 0..15, float32), `attention_mask` [B, P + T], `position_ids` [B, T]
  (0-based per row, padding excluded) -> `hidden` [B, D] (the last position, after ln_f) and the new K/V.
- `local_step`: the local transformer over its own small past (one frame's positions, every row of a batch at the
  same local position, so no mask): `inputs_embeds` [B, T, D], `audio_head` [C, D] (the tied head of the LAST new
  position p's codebook: `audio_embeddings[head_codebook(p)]`, fed by the runtime from its table) and the local
  past K/V -> `text_logits` [B, 2] (the FIRST new position's logits of (audio_assistant_slot, audio_end), in that
  order) and `audio_logits` [B, C] (the LAST new position p's logits of codebook p - 1, p = past + T - 1 >= 1; at
  p = 0 codebook 0's, unused) and the new K/V. A frame: step [hidden] (past 0) -> text_logits; if the slot wins, step [wte(slot)] (or both at once,
  T = 2, from past 0) -> audio_logits of codebook 0; then step [emb_c(code_c)] -> codebook c + 1, for c = 0..14.
  The 16th code needs no further step.
- `local_code_step`: those last 15 steps as the runtime makes them: one position at a time over a fixed-size local
  cache (LOCAL_CACHE slots, the frame's earlier positions' K/V written in place by the caller, the rest masked by
  `position`), every shape but the batch fixed, so the graph does no shape arithmetic and the caller no
  concatenation (`local_code_step_spec`).

Sampling stays in the runtime (numpy, over the graphs' logits; the reference's order, mlx_audio sampling.py):
stop/continue over the two text logits (greedy: argmax, the slot on a tie; sampled: temperature, top-k capped at 2,
top-p, then one draw), each codebook: repetition penalty over that codebook's codes of the chunk's earlier frames
(unique ids; x < 0 ? x * p : x / p; applied before greedy argmax too), then temperature, top-k, top-p, one draw.
"""

from __future__ import annotations

from ttscore.contract import kv
from ttscore.contract.graphs import GraphSpec, TensorSpec
from ttscore.contract.kv import ragged_step_inputs, step_spec

# The family's K/V tensor names (ttscore.contract.kv), the same for both stacks.
past_key, past_value, new_key, new_value = kv.past_key, kv.past_value, kv.new_key, kv.new_value

MODEL_TYPE = "moss_tts_nano"  # config.json's model_type
ARCHITECTURE = "MossTTSNanoForCausalLM"

SAMPLE_RATE = 48000  # the codec's (config audio_tokenizer_sample_rate)
FRAMES_PER_SECOND = 12.5
SAMPLES_PER_FRAME = 3840  # per channel, at 48 kHz
N_VQ = 16  # codebooks per frame (config n_vq)
ROW_WIDTH = N_VQ + 1  # a prompt row: [text_or_slot_id, c_0 .. c_15]
CODEBOOK_SIZE = 1024  # the real checkpoint's (config audio_vocab_size); a tiny one may have fewer
# Where the codebook columns of a text row hold the pad id, which is config audio_pad_token_id (= the codebook size).

# Text token ids (config.json; the SentencePiece model has the same specials at these ids).
PAD_ID = 3
IM_START_ID = 4
IM_END_ID = 5
AUDIO_START_ID = 6
AUDIO_END_ID = 7
AUDIO_USER_SLOT_ID = 8  # column 0 of a reference clip's code rows
AUDIO_ASSISTANT_SLOT_ID = 9  # column 0 of a generated row; the "continue" decision
# The stop rule: per frame the decision is between these two text ids only (text_logits' order); any id but the
# slot ends the chunk. A greedy tie picks the slot (the first).
STOP_CANDIDATES = (AUDIO_ASSISTANT_SLOT_ID, AUDIO_END_ID)
LOCAL_POSITIONS = N_VQ + 1  # a frame's local sequence: the global hidden, the slot, codes 0..14 (+ code 15 unfed)

# Tables (numpy .npy beside the graphs), float32: the text embedding `wte` [V, D] and the codebook embeddings
# [N_VQ, C, D] (also the tied heads).
WTE = "wte"
AUDIO_EMBEDDINGS = "audio_embeddings"
# `local_code_step`'s local K/V cache: the positions a codebook's step may attend to (0 .. N_VQ - 1; position
# N_VQ, the last code's input, gives codebook 15's logits and its own K/V is never needed).
LOCAL_CACHE = N_VQ
GRAPH_NAMES = ("global_step", "local_step", "local_code_step")


def global_step_spec(layers: int, dim: int, heads: int, head_dim: int) -> GraphSpec:
    """The global transformer over an explicit past: `inputs_embeds` [B, T, D], `attention_mask` [B, P + T] (int64;
    1 = a valid slot: the past's valid slots, then the new positions, causal among themselves), `position_ids`
    [B, T] -> `hidden` [B, D] (last position, final LayerNorm applied) and every layer's new K/V (rotated)."""
    return step_spec("global_step", ragged_step_inputs(dim), (TensorSpec("hidden", "float32", ("batch", dim)),),
                     layers, heads, head_dim)


def head_codebook(last_position: int) -> int:
    """The codebook whose logits local position `last_position` gives: the tied head `audio_embeddings[p - 1]` (the
    slot at position 1 gives codebook 0; position 0, the global hidden state, gives only the stop logits)."""
    return max(last_position - 1, 0)


def local_step_spec(layers: int, dim: int, heads: int, head_dim: int, codebook_size: int) -> GraphSpec:
    """The local transformer over its own past (positions past .. past + T - 1, no mask: every row of a batch is at
    the same local position): `inputs_embeds` [B, T, D] and `audio_head` [C, D], the tied head of the last new
    position's codebook (`head_codebook`; fed from the runtime's embedding table, read in place: the graph holds
    no copy of the heads and gathers none) -> `text_logits` [B, 2] (first new position) and `audio_logits` [B, C]
    (last new position's codebook) and the new K/V."""
    return step_spec(
        "local_step",
        (TensorSpec("inputs_embeds", "float32", ("batch", "tokens", dim)),
         TensorSpec("audio_head", "float32", (codebook_size, dim))),
        (
            TensorSpec("text_logits", "float32", ("batch", len(STOP_CANDIDATES))),
            TensorSpec("audio_logits", "float32", ("batch", codebook_size)),
        ),
        layers, heads, head_dim,
    )


def local_code_step_spec(layers: int, dim: int, heads: int, head_dim: int, codebook_size: int) -> GraphSpec:
    """One position of the local transformer over a fixed-size local cache, every shape static but the batch (no
    shape arithmetic left for the graph to do per call): `inputs_embeds` [B, D] at local `position` [1] (>= 1,
    the same for every row), `audio_head` [C, D] (its codebook's tied head, `head_codebook(position)`) and per
    layer `cache_key_<i>` / `cache_value_<i>` [B, H, LOCAL_CACHE, hd], of which slots < position hold the frame's
    earlier positions' K/V (the rest are masked: any finite values) -> `audio_logits` [B, C] and the position's
    `new_key_<i>` / `new_value_<i>` [B, H, 1, hd], which the caller writes into slot `position` of its cache (in
    place, no concatenation). The same arithmetic as `local_step` at one new position."""
    cache = [t for i in range(layers) for t in (
        TensorSpec(cache_key(i), "float32", ("batch", heads, LOCAL_CACHE, head_dim)),
        TensorSpec(cache_value(i), "float32", ("batch", heads, LOCAL_CACHE, head_dim)))]
    new = [t for i in range(layers) for t in (
        TensorSpec(new_key(i), "float32", ("batch", heads, 1, head_dim)),
        TensorSpec(new_value(i), "float32", ("batch", heads, 1, head_dim)))]
    return GraphSpec(
        "local_code_step",
        (TensorSpec("inputs_embeds", "float32", ("batch", dim)), TensorSpec("position", "int64", (1,)),
         TensorSpec("audio_head", "float32", (codebook_size, dim)), *cache),
        (TensorSpec("audio_logits", "float32", ("batch", codebook_size)), *new),
    )


def cache_key(i: int) -> str:
    return f"cache_key_{i}"


def cache_value(i: int) -> str:
    return f"cache_value_{i}"
