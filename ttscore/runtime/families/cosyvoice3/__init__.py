"""CosyVoice3 (FunAudioLLM/Fun-CosyVoice3-0.5B-2512): the checkpoint reader so far (not served yet)."""
