"""VoxCPM2 (openbmb/VoxCPM2): tiny checkpoints, export to validated ONNX graphs (see README.md)."""
