"""MOSS-Audio-Tokenizer-Nano's reference: mlx-audio 0.6.2's `MossAudioTokenizer`, run in "mlx" through refenv.

`python moss_tts_nano_codec_mlx.py IN.npz OUT.npz <checkpoint or codec dir>`: the codec is found as mlx-audio's
`from_model_dir` finds it (`<dir>/audio_tokenizer/`, else `<dir>`) and loaded strictly. IN.npz holds:
- `audio_i` [samples] mono float32 at 48 kHz -> `codes_i` [frames, 16] (`encode_audio`, which repeats a mono clip
  to the two channels);
- `codes_j` [frames, 16] -> `whole_j` [samples, 2] (`decode_audio_codes`), and with `chunks_j` (frame counts)
  also `stream_j` [samples, 2] (`make_streaming_decoder().decode_frames` chunk by chunk, joined).
"""

from __future__ import annotations

import numpy as np
from refenv import serve


def main(inputs: dict[str, np.ndarray], codec: str) -> dict[str, np.ndarray]:
    from mlx_audio.codec.models.moss_audio_tokenizer import MossAudioTokenizer

    model = MossAudioTokenizer.from_model_dir(codec)
    out: dict[str, np.ndarray] = {}
    for key, value in inputs.items():
        kind, _, i = key.partition("_")
        if kind == "audio":
            codes = model.encode_audio(np.asarray(value, np.float32), sample_rate=48000)
            out[f"codes_{i}"] = np.asarray(codes, dtype=np.int64)
        elif kind == "codes":
            out[f"whole_{i}"] = np.asarray(model.decode_audio_codes(value.astype(np.int32)), np.float32)
            if f"chunks_{i}" in inputs:
                dec = model.make_streaming_decoder()
                pieces, at = [], 0
                for n in inputs[f"chunks_{i}"].tolist():
                    pieces.append(np.asarray(dec.decode_frames(value[at:at + n].astype(np.int32)), np.float32))
                    at += n
                out[f"stream_{i}"] = np.concatenate(pieces, axis=0)
    return out


if __name__ == "__main__":
    serve(main)
