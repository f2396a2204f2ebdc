"""The Voxtral TTS family's side of the contract: its fixed facts (offline only so far).

Voxtral TTS (mistralai/Voxtral-4B-TTS-2603; the reference is vLLM-Omni 0.30.0's plain-torch
`FlowMatchingAudioTransformer` and `VoxtralTTSAudioTokenizer` over Hugging Face's `MistralModel`) is a
Ministral language model whose last hidden state gives, per 80 ms frame, a semantic code (argmax of
`semantic_codebook_output`) and 36 acoustic codes (a small bidirectional flow-matching transformer,
Euler steps with classifier-free guidance, quantised to 21 levels); the 37 codes' embeddings, summed,
are the next input. Mistral's causal codec turns the frames into 24 kHz audio. Preset voices only
(the public checkpoint has no codec encoder).
"""

from __future__ import annotations

FAMILY = "voxtral_tts"
DISPLAY = "Voxtral TTS"
HUB_ORG = "mistralai"

# vLLM-Omni's AudioSpecialTokens: the first two ids of every audio codebook.
EMPTY_AUDIO = 0
END_AUDIO = 1
NUM_AUDIO_SPECIAL = 2
# vLLM-Omni's parser: params.json without acoustic_transformer_args.n_decoding_steps gets 7 (with a warning).
DEFAULT_DECODING_STEPS = 7
DEFAULT_CFG_ALPHA = 1.2  # VoxtralTTSForConditionalGeneration._DEFAULT_CFG_ALPHA
MAX_NEW_TOKENS_LIMIT = 4096
