"""MOSS-Audio-Tokenizer-Nano, the MOSS-TTS-Nano codec (OpenMOSS-Team/MOSS-Audio-Tokenizer-Nano): its fixed
facts and the GraphSpecs of its two exported graphs.

The codec is a stack of causal sliding-window transformers and patch reshapes over the *interleaved* stereo
stream (L R L R ...): 48 kHz x 2 channels, 3840 samples of each channel per frame (12.5 frames/s), 16 residual
LFQ codebooks. Both graphs are exact streaming graphs over whole frames: each reads the K/V window of every
transformer layer from a flat float32 state of S floats per stream (zeros start a clip) and takes the frames
already done on that row (`position`, the RoPE offset); chunks run one after another equal one whole run,
across the windows too.

- `moss_codec_decoder` (the family's streaming vocoder): codes [batch, frames, 16] -> pcm [batch, frames *
  3840], the two decoded channels downmixed to mono by their mean (vLLM-Omni serves the mean). Its state stays in
  the caller's arena (`arena_vocoder_spec`: the graph reads each row's filled window slots and returns the slots it
  writes, one position's keys or values of one layer, [heads * head_dim] wide, per block), so a call does not copy
  the 46 MB of every stream's windows. Its state size and layout are the manifest's `vocoder` section.
- `moss_codec_encoder` (the reference clip encoder): mono 48 kHz audio [batch, frames * 3840] (a whole number
  of frames; the clip is repeated to the two channels inside, as upstream repeats a mono reference) -> codes
  [batch, frames, 16]. A clip's trailing partial frame gives no code (the reference's code length is
  floor(samples / 3840)), so callers drop it. Its state size and layout are the manifest's
  `codec.encoder_state_size` / `codec.encoder_state_layout`. Fed chunk by chunk, its memory stays bounded
  whatever the clip's length.
"""

from __future__ import annotations

from typing import cast

from ttscore.contract.graphs import GraphSpec, TensorSpec, arena_vocoder_spec

SAMPLE_RATE = 48000  # codec input and output rate (config `sampling_rate`)
CHANNELS = 2  # config `number_channels`; interleaved (`enable_channel_interleave`)
SAMPLES_PER_FRAME = 3840  # samples of each channel per frame (config `downsample_rate`)
FRAME_RATE = SAMPLE_RATE / SAMPLES_PER_FRAME  # 12.5 frames/s
NUM_QUANTIZERS = 16  # codes per frame (quantizer_kwargs.num_quantizers)
CODEBOOK_SIZE = 1024  # quantizer_kwargs.codebook_size of the real codec (a tiny one may have fewer)

# The codec checkpoint: `<checkpoint>/audio_tokenizer/`, else the LM config's key naming it.
CODEC_SUBDIR = "audio_tokenizer"
CODEC_CONFIG_KEY = "audio_tokenizer_pretrained_name_or_path"
CODEC_REPO = "OpenMOSS-Team/MOSS-Audio-Tokenizer-Nano"

DECODER = "moss_codec_decoder"
ENCODER = "moss_codec_encoder"
# The manifest's own field of this family holding the codec facts (encoder state, channels, codebook size).
MANIFEST_FIELD = "codec"


def decoder_spec(state_size: int | str, num_quantizers: int = NUM_QUANTIZERS) -> GraphSpec:
    """The streaming vocoder: (codes, state arena, row, position) -> (pcm mono, state_index, state_values);
    `state_size` a name where a deployment's config leaves it symbolic."""
    return arena_vocoder_spec(DECODER, TensorSpec("codes", "int64", ("batch", "frames", num_quantizers)),
                              cast(int, state_size), TensorSpec("position", "int64", ("batch",)))


def encoder_spec(state_size: int | str, num_quantizers: int = NUM_QUANTIZERS) -> GraphSpec:
    """The streaming reference encoder: (audio mono 48 kHz, state, position) -> (codes, new_state)."""
    state = ("batch", state_size)
    return GraphSpec(
        ENCODER,
        (TensorSpec("audio", "float32", ("batch", "samples")), TensorSpec("state", "float32", state),
         TensorSpec("position", "int64", ("batch",))),
        (TensorSpec("codes", "int64", ("batch", "frames", num_quantizers)),
         TensorSpec("new_state", "float32", state)),
    )
