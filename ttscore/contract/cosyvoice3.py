"""The CosyVoice3 family's side of the contract: its fixed facts (FunAudioLLM/Fun-CosyVoice3-0.5B-2512).

Three stages: a Qwen2 language model over `[sos, text, task_id, prompt speech tokens]` emitting 25 Hz
speech tokens (RAS sampling; every id >= speech_token_size is a stop id), a DiT flow-matching model
(10 Euler steps, cosine schedule, classifier-free guidance 0.7) turning prompt + new tokens into 80-bin
mel frames at 50 Hz, and a causal HiFT vocoder (neural source filter + inverse STFT) at 24 kHz.
Voice cloning only: `ref_audio` with its transcript `ref_text` (no presets).
"""

from __future__ import annotations

FAMILY = "cosyvoice3"
DISPLAY = "CosyVoice3"
HUB_ORG = "FunAudioLLM"

# CosyVoice3LM: the 200 rows after the speech codebook are special; sos/eos/task_id/fill are the first four.
NUM_SPECIAL_SPEECH = 200
SOS_OFFSET, EOS_OFFSET, TASK_ID_OFFSET, FILL_OFFSET = 0, 1, 2, 3
# RAS sampling (cosyvoice3.yaml llm.sampling; vLLM-Omni's _ras_sample_one).
TOP_P, TOP_K, WIN_SIZE, TAU_R = 0.8, 25, 10, 0.1
MIN_TOKEN_TEXT_RATIO, MAX_TOKEN_TEXT_RATIO = 2, 20
# Flow: n_timesteps 10 (CausalMaskedDiffWithDiT.inference), cosine t schedule, CFG rate from the yaml.
FLOW_STEPS = 10
# The prompt delimiter vLLM-Omni's adapter prepends (with this system text) when ref_text lacks it.
END_OF_PROMPT = "<|endofprompt|>"
DEFAULT_PROMPT_PREFIX = "You are a helpful assistant." + END_OF_PROMPT
