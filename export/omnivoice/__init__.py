"""OmniVoice export (k2-fsa/OmniVoice): make-tiny, the generator and codec decoder graphs."""
