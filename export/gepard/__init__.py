"""Gepard-1.0 export (README.md)."""
