"""Word timestamps as a served component: the Triton model `forced_aligner` (model_repository/forced_aligner), which
times the words of a text in the audio they were spoken in. The model behind it is the built-in aligner
(ttscore.contract.plugins.ALIGNER: Qwen3-ForcedAligner, its facts in its own contract module); this is what every
caller sees of it.
"""

from __future__ import annotations

from ttscore.contract.wire import TensorIO, string_input

MODEL = "forced_aligner"
MAX_AUDIO_SECONDS = 300.0  # the released aligner's limit (5 minutes); a longer clip is refused naming `audio`

# One clip and its text per request.
INPUTS: tuple[TensorIO, ...] = (
    TensorIO("audio", "FP32", (-1,), doc="The audio the words were spoken in, mono float32 in [-1, 1]."),
    TensorIO("sample_rate", "INT32", (1,), doc="Its sample rate (resampled to the rate the aligner reads)."),
    string_input("text", "The text spoken (UTF-8); the words' character offsets index it.", optional=False),
    string_input("language", "The text's language by name (English, Chinese, Japanese, Korean, ...): how its "
                 "words are cut.", optional=False),
)
OUTPUTS: tuple[TensorIO, ...] = (
    TensorIO("word_text", "BYTES", (-1,), doc="Each word as the aligner times it (UTF-8)."),
    TensorIO("word_start", "FP32", (-1,), doc="Each word's start, seconds from the clip's start."),
    TensorIO("word_end", "FP32", (-1,), doc="Each word's end, seconds from the clip's start."),
    TensorIO("char_start", "INT32", (-1,), doc="Each word's first character in `text` (code points, its "
             "punctuation included)."),
    TensorIO("char_end", "INT32", (-1,), doc="One past each word's last character in `text`."),
)
