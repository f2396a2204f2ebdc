"""Qwen3-ForcedAligner at serve time (numpy + onnxruntime, no torch): its checkpoint's facts, the log-mel front end,
word splitting with character offsets, the timestamp repair, and the exported graphs run together (`model`)."""
