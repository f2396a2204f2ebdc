"""VoxCPM2 (openbmb/VoxCPM2): prompt, per-patch decode over exported graphs (export/voxcpm2/README.md)."""
