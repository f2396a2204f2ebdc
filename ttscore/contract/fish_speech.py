"""The Fish Speech family's side of the contract: its fixed facts (not served yet).

Fish Speech S2 Pro (fishaudio/s2-pro, model_type `fish_qwen3_omni`; licence: Fish Audio Research
License, non-commercial) is a dual autoregressive model: a Qwen3-like Slow AR over frames samples one
semantic token per frame (its logits masked to the 4096 semantic ids and `<|im_end|>`), a small Fast AR
samples the frame's 9 residual codes one after another, and the frame's next input is the token's
embedding plus the 10 codebook embeddings, over sqrt(11). A modded DAC codec (1 semantic + 9 residual
codebooks, 2048 samples a frame) turns the frames into 44.1 kHz audio; its encoder turns a reference
clip into the codes of a cloning prompt. The reference is vLLM-Omni 0.30.0's fish_speech package.
"""

from __future__ import annotations

FAMILY = "fish_speech"
DISPLAY = "Fish Speech S2 Pro"
HUB_ORG = "fishaudio"
MODEL_TYPE = "fish_qwen3_omni"  # config.json's model_type

SAMPLE_RATE = 44100  # vLLM-Omni dac_utils.DAC_SAMPLE_RATE
NUM_CODEBOOKS = 10  # 1 semantic + 9 residual
# vLLM-Omni hard-codes these: `<|im_end|>` (the one non-semantic id the Slow AR may sample: its stop token)
# and the residual codebooks' size (the Fast AR's logits are cut to their first 1024).
IM_END_ID = 151645
RESIDUAL_CODEBOOK_SIZE = 1024

# Sampling defaults (vLLM-Omni's deploy config fish_qwen3_omni.yaml and FishSpeechFastAR's defaults).
DEFAULT_TEMPERATURE = 0.8
DEFAULT_TOP_K = 30
DEFAULT_TOP_P = 0.9
DEFAULT_MAX_NEW_TOKENS = 2048
MAX_NEW_TOKENS_LIMIT = 4096

# The prompt (vLLM-Omni prompt_utils): the special tokens it looks up by name.
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
VOICE = "<|voice|>"
AUDIO_START = "<|audio_start|>"
AUDIO_END = "<|audio_end|>"
TEXT_ONLY_SYSTEM_PROMPT = "convert the provided text to speech"
CLONE_SYSTEM_PROMPT_PREFIX = "convert the provided text to speech reference to the following:\n\nText:\n"
CLONE_SYSTEM_PROMPT_SUFFIX = "\n\nSpeech:\n"
