"""Voxtral TTS (offline so far): the checkpoint's facts (checkpoint.py)."""
