"""CosyVoice3 (FunAudioLLM/Fun-CosyVoice3-0.5B-2512): checkpoint reader, front-end, sampling, the offline
route over the exported graphs and the FamilyModel for the shared engine (export/cosyvoice3/README.md).
Not registered in ttscore.runtime.families yet (the contract, backend and gateway layers are to come)."""
