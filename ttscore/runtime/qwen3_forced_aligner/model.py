"""The exported aligner run on one clip and one text (numpy + onnxruntime): the public entry of word timestamps.

    aligner = ForcedAligner(artifacts)
    words = aligner.align(audio_16k, "Hello, world!", language="English")   # [Word(text, start, end, char_start,
                                                                            #        char_end)]

`align` does what qwen-asr 0.0.6's `Qwen3ForcedAligner.align` does for one sample: words cut per language, the
prompt tokenized, Whisper's log-mel, the audio encoder, one pass of the classifier, each `<timestamp>` slot's class
times `timestamp_segment_time`, the repair, seconds; plus each word's span in the text as given. Audio at another
rate is resampled first (ttscore.runtime.audio.resample). Not thread-safe per instance beyond what onnxruntime's
sessions allow (one call at a time is the simple rule).

`windowed_attention`: qwen-asr's transformers backend (sdpa or eager attention, its default) lets every audio frame
attend to the whole clip; with flash attention its encoder attends inside windows of `n_window_infer` frames. The
two agree on clips up to one window (8 s for the released model). The default is the reference's default.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ttscore.contract import qwen3_forced_aligner as spec
from ttscore.contract.errors import ArtifactError, InvalidRequest
from ttscore.contract.manifest import read_manifest
from ttscore.runtime.audio import resample
from ttscore.runtime.families.qwen3_tts.tokenizer import TextTokenizer, pretokenizer_regex
from ttscore.runtime.onnx import OnnxGraph, open_graph, open_table
from ttscore.runtime.qwen3_forced_aligner.checkpoint import CONFIG, AlignerInfo, parse_config
from ttscore.runtime.qwen3_forced_aligner.frontend import chunk_layout, log_mel
from ttscore.runtime.qwen3_forced_aligner.words import Word, prompt_text, splitter, timed_words

TOKENIZER_DIR = "tokenizer"


@dataclass(frozen=True)
class Alignment:
    """One alignment's words and what the classifier said: each `<timestamp>` slot's class (before the repair)."""

    words: list[Word]
    classes: list[int]


class ForcedAligner:
    def __init__(self, artifacts: str | Path, threads: int | None = None, windowed_attention: bool = False) -> None:
        root = Path(artifacts)
        manifest = read_manifest(root)
        if manifest.family != spec.COMPONENT:
            raise ArtifactError(f"{root} is an export of {manifest.family!r}, not of {spec.DISPLAY}")
        config = manifest.config(CONFIG)
        self.info: AlignerInfo = parse_config(config)
        self.encoder: OnnxGraph = open_graph(root, manifest, "audio_encoder", threads)
        self.classifier: OnnxGraph = open_graph(root, manifest, "aligner", threads)
        self.filters = np.ascontiguousarray(open_table(root, spec.MEL_FILTERS))
        # qwen-asr loads its processor with fix_mistral_regex=True: the same split rule (see the tokenizer's doc)
        self.tokenizer = TextTokenizer(root / TOKENIZER_DIR, regex=pretokenizer_regex(config))
        self.windowed_attention = windowed_attention

    def words(self, text: str, language: str) -> list[str]:
        """The words `text` is timed by (qwen-asr's cutting for `language`)."""
        return splitter(language)(text)

    def audio_embeddings(self, audio: NDArray[Any]) -> NDArray[np.float32]:
        """[M, H] audio embeddings of a 16 kHz mono clip."""
        a = self.info.audio
        lay = chunk_layout(log_mel(audio, self.filters), a.chunk_frames, a.n_window_infer // a.chunk_frames)
        window = lay.window_id if self.windowed_attention else np.zeros_like(lay.window_id)
        out = self.encoder.run({"chunks": lay.chunks, "valid_index": lay.valid_index, "window_id": window})
        return np.asarray(out["audio_embeds"], dtype=np.float32)

    def prompt_ids(self, words: list[str], audio_embeddings: int) -> NDArray[np.int64]:
        """The prompt's token ids: `<|audio_pad|>` repeated once per audio embedding, then the words and slots."""
        text = prompt_text(words).replace(spec.AUDIO_PAD, spec.AUDIO_PAD * audio_embeddings, 1)
        return np.asarray(self.tokenizer.encode(text), dtype=np.int64)

    def classify(self, ids: NDArray[np.int64], embeddings: NDArray[np.float32]) -> NDArray[np.int64]:
        """Every position's class (one row)."""
        out = self.classifier.run({"input_ids": ids[None], "attention_mask": np.ones((1, ids.shape[0]), np.int64),
                                   "audio_embeds": embeddings[None]})
        return np.asarray(out["classes"][0], dtype=np.int64)

    def alignment(self, audio: NDArray[Any], text: str, language: str, sample_rate: int = spec.SAMPLE_RATE
                  ) -> Alignment:
        clip = np.asarray(audio, dtype=np.float32)
        if clip.ndim != 1:
            raise InvalidRequest("the aligner takes one mono clip", "audio")
        if sample_rate != spec.SAMPLE_RATE:
            clip = resample(clip, sample_rate, spec.SAMPLE_RATE).astype(np.float32)
        if clip.shape[0] < spec.HOP_LENGTH:
            raise InvalidRequest(f"the clip is shorter than {spec.HOP_LENGTH / spec.SAMPLE_RATE:.2f} s", "audio")
        words = self.words(text, language)
        if not words:
            return Alignment([], [])
        embeddings = self.audio_embeddings(clip)
        ids = self.prompt_ids(words, embeddings.shape[0])
        if int((ids == self.info.audio_token_id).sum()) != embeddings.shape[0]:
            raise ArtifactError("the tokenizer does not keep <|audio_pad|> as one token: re-export the aligner")
        classes = self.classify(ids, embeddings)
        slots = [int(c) for c in classes[ids == self.info.timestamp_token_id]]
        return Alignment(timed_words(text, words, slots, self.info.timestamp_segment_time), slots)

    def align(self, audio: NDArray[Any], text: str, language: str, sample_rate: int = spec.SAMPLE_RATE
              ) -> list[Word]:
        """The words of `text` with their start and end (seconds from the clip's start) and their spans in `text`."""
        return self.alignment(audio, text, language, sample_rate).words
