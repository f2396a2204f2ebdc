"""The forced aligner's side of the contract: Qwen3-ForcedAligner (Qwen/Qwen3-ForcedAligner-0.6B), the model that
gives each word of a text its start and end in an audio clip.

It is not a speech family: it reads 16 kHz audio and a text and answers word timestamps. The reference is
`qwen-asr` 0.0.6's `Qwen3ForcedAligner`: Whisper's log-mel front end, the Qwen3-ASR audio encoder (chunks of
`2 * n_window` mel frames through three stride-2 convolutions, attention inside windows of chunks), then one
non-autoregressive pass of the Qwen3 text stack over `<|audio_start|>` + the audio embeddings + `<|audio_end|>` +
each word followed by two `<timestamp>` slots; each slot's class (argmax over `classify_num`) times
`timestamp_segment_time` milliseconds is its time, repaired to be non-decreasing (ttscore.runtime.qwen3_forced_aligner.words).

Two exported graphs: `audio_encoder` (padded mel chunks -> audio embeddings) and `aligner` (token ids + audio
embeddings -> each position's class and logits). The Triton model that serves it is the generic `forced_aligner`
(ttscore.contract.aligner).
"""

from __future__ import annotations

from ttscore.contract.graphs import GraphSpec, TensorSpec

COMPONENT = "qwen3_forced_aligner"  # the manifest's `family` of an aligner export (not a speech family)
MODEL_TYPE = "qwen3_asr"  # config.json's model_type
THINKER_MODEL_TYPE = "qwen3_forced_aligner"  # thinker_config.model_type: the classifier head, not the vocabulary one
DISPLAY = "Qwen3-ForcedAligner"
SAMPLE_RATE = 16000  # what the front end reads (qwen_asr.inference.utils.SAMPLE_RATE)
HOP_LENGTH = 160  # mel frames every 10 ms
N_FFT = 400

# The prompt's special tokens (the tokenizer's; their ids come from config.json and the tokenizer files).
AUDIO_START, AUDIO_PAD, AUDIO_END = "<|audio_start|>", "<|audio_pad|>", "<|audio_end|>"
TIMESTAMP = "<timestamp>"

# Tables of an export (numpy .npy beside the graphs).
MEL_FILTERS = "mel_filters"  # [n_fft / 2 + 1, num_mel_bins], Whisper's Slaney filter bank

# Languages whose words the aligner splits its own way (qwen-asr's Qwen3ForceAlignProcessor.encode_timestamp);
# every other language is split at spaces with CJK characters on their own.
JAPANESE, KOREAN = "japanese", "korean"


def audio_encoder_spec(num_mel_bins: int, output_dim: int) -> GraphSpec:
    """`chunks` [N, mel, C]: the mel frames cut into chunks of 2 * n_window (the last zero-padded; C the longest
    chunk); `valid_index` [M]: which of the N x C' convolution outputs are real frames (row-major); `window_id`
    [M]: each frame's attention window (frames attend only inside their window) -> `audio_embeds` [M, out]."""
    return GraphSpec(
        name="audio_encoder",
        inputs=(TensorSpec("chunks", "float32", ("chunks", num_mel_bins, "frames")),
                TensorSpec("valid_index", "int64", ("audio",)),
                TensorSpec("window_id", "int64", ("audio",))),
        outputs=(TensorSpec("audio_embeds", "float32", ("audio", output_dim)),),
    )


def aligner_spec(hidden: int, classes: int) -> GraphSpec:
    """`input_ids` [B, T] (left-padded rows), `attention_mask` [B, T], `audio_embeds` [B, A, H]: each row's audio
    embeddings, in order, for its `<|audio_pad|>` positions -> `classes` [B, T] (argmax) and `logits` [B, T, K]."""
    return GraphSpec(
        name="aligner",
        inputs=(TensorSpec("input_ids", "int64", ("batch", "tokens")),
                TensorSpec("attention_mask", "int64", ("batch", "tokens")),
                TensorSpec("audio_embeds", "float32", ("batch", "audio", hidden))),
        outputs=(TensorSpec("classes", "int64", ("batch", "tokens")),
                 TensorSpec("logits", "float32", ("batch", "tokens", classes))),
    )

