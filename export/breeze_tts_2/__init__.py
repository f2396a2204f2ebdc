"""Breeze-TTS-2 export: graphs, tiny checkpoints (README.md)."""
