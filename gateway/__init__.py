"""OpenAI-compatible Speech API gateway in front of Triton (see gateway/app.py: create_app)."""
