"""MOSS-TTS-Nano's prompt and text chunks as mlx-audio 0.6.2 makes them, run in "mlx" through refenv.

`python moss_tts_nano_prompt_mlx.py IN.npz OUT.npz <tokenizer dir> <audio pad id>`: the tokenizer is mlx-audio's
`load_tokenizer(dir)` (SentencePiece over `<dir>/tokenizer.model`). IN.npz holds `texts` (a string array) and
`codes` [frames, 16]; OUT.npz `rows_i` [rows, 17] (`Model.build_inference_input_ids`, voice_clone mode, on text i
and the codes) and `chunks_i` (a string array: `split_text_into_best_sentences` of text i after
`lightweight_normalize_text`, at 50 tokens: vLLM-Omni's budget).
"""

from __future__ import annotations

import numpy as np
from refenv import serve


def main(inputs: dict[str, np.ndarray], tokenizer_dir: str, audio_pad: str) -> dict[str, np.ndarray]:
    import mlx.core as mx
    from mlx_audio.tts.models.moss_tts_nano.config import ModelConfig
    from mlx_audio.tts.models.moss_tts_nano.moss_tts_nano import Model
    from mlx_audio.tts.models.moss_tts_nano.text import (
        lightweight_normalize_text,
        load_tokenizer,
        split_text_into_best_sentences,
    )

    pad = int(audio_pad)
    config = ModelConfig.from_dict({
        "gpt2_config": {"n_embd": 8, "n_layer": 1, "n_head": 2, "n_inner": 16, "vocab_size": 400},
        "n_vq": 16, "audio_vocab_size": pad, "audio_codebook_sizes": [pad] * 16, "audio_pad_token_id": pad,
    })
    model = Model(config)
    tokenizer = load_tokenizer(tokenizer_dir)
    codes = mx.array(inputs["codes"].astype(np.int32))
    out: dict[str, np.ndarray] = {}
    for i, text in enumerate(inputs["texts"].tolist()):
        ids, _ = model.build_inference_input_ids(text=text, tokenizer=tokenizer, mode="voice_clone",
                                                 prompt_audio_codes=codes)
        out[f"rows_{i}"] = np.asarray(ids[0], dtype=np.int64)
        out[f"chunks_{i}"] = np.array(split_text_into_best_sentences(
            tokenizer, lightweight_normalize_text(text), max_tokens=50), dtype=str)
    return out


if __name__ == "__main__":
    serve(main)
