"""toy_tone: a throwaway model family that lives only in this package (issue 18's plugin test).

It is also the smallest example of a family package: one module per layer, each exposing `FAMILY`,
found through `TTS_FAMILY_PACKAGES=toy_tone` (or the entry-point group `triton_tts.families`) by
ttscore.contract.plugins; no file of the project names it.

    contract.py  FamilyRules + WIRE: what requests may hold (the gateway and the runtime check it)
    runtime.py   the runtime Family: one frame per input character, an in-process streaming vocoder
    backend.py   BackendFamily: no Triton model but speech_generation (the vocoder runs inline)
    gateway.py   the gateway adapter: one voice ("default"), a 400 naming each field it does not take
    export.py    ExportFamily: make-tiny writes config.json + weights.npz, export one ONNX graph

The model: a character's id picks a row of `embed` [vocab, hidden]; the `frames` graph projects it
through `proj` [hidden, samples_per_frame] to one frame of samples; the vocoder smooths the samples
with a one-pole filter y[n] = a * y[n-1] + (1 - a) * x[n] whose state (the last sample) carries
across chunks, so streamed audio equals the whole clip.
"""
