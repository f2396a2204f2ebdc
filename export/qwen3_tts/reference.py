"""Loading the reference implementation (the `qwen-tts` package) for export and parity checks.

qwen-tts imports `torchaudio` and `sox` at import time for its 25 Hz tokenizer only; neither is
used by the 12 Hz models we serve, torchaudio would drag in another torch build and `sox` wants the
SoX binary. `reference_imports` installs inert stand-ins for exactly those modules while qwen_tts is
first imported (export.reference.stubbed_imports).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from export.reference import stubbed_imports
from export.weights import load_tensors, tensor_files, unload_tensors
from ttscore.contract.errors import CheckpointError

logger = logging.getLogger(__name__)

_STUBBED = ("torchaudio", "torchaudio.compliance", "torchaudio.compliance.kaldi", "sox")


def reference_imports() -> contextlib.AbstractContextManager[None]:
    """qwen_tts imported, with stand-ins for the modules of its 25 Hz tokenizer."""
    return stubbed_imports("qwen_tts", _STUBBED)


def load_reference(checkpoint: str | Path, **kwargs: Any) -> Any:
    """Qwen3TTSModel.from_pretrained on CPU in float32, eager attention (what export traces)."""
    import torch

    with reference_imports():
        from qwen_tts import Qwen3TTSModel

        kwargs.setdefault("dtype", torch.float32)
        kwargs.setdefault("attn_implementation", "eager")
        kwargs.setdefault("device_map", "cpu")
        model = Qwen3TTSModel.from_pretrained(str(checkpoint), **kwargs)
    model.model.eval()
    return model


# Weights each export stage reads (prefixes of the checkpoint's parameter names).
TALKER_WEIGHTS = ("talker.model.layers.", "talker.model.norm.", "talker.codec_head.")
CODE_PREDICTOR_WEIGHTS = ("talker.code_predictor.", "talker.model.codec_embedding.")
TABLE_WEIGHTS = (
    "talker.model.text_embedding.", "talker.text_projection.", "talker.model.codec_embedding.",
    "talker.code_predictor.model.codec_embedding.",
)
SPEAKER_ENCODER_WEIGHTS = ("speaker_encoder.",)


class StagedReference:
    """The reference model (`Qwen3TTSForConditionalGeneration`, float32, eager attention) with its
    parameters on the meta device until an export stage asks for some of them.

    `load_reference` materializes the whole model in float32 (a 1.7B checkpoint: 8.4 GB, converted
    from bf16) and keeps it for the whole export. Here the module tree is built empty (buffers such
    as the RoPE inverse frequencies are real, computed by the constructors exactly as from_pretrained
    computes them), and `loaded(prefixes)` reads only the named tensors from the memory-mapped
    safetensors file(s), one tensor at a time, casting each to float32; leaving the block puts them
    back on the meta device, so the next stage starts without them. The speech tokenizer (float32 on
    disk, 0.7 GB) is loaded whole by `speech_tokenizer()` for the stages that need it.
    """

    def __init__(self, checkpoint: str | Path) -> None:
        from accelerate import init_empty_weights

        self.checkpoint = Path(checkpoint)
        self._files = tensor_files(self.checkpoint)
        with reference_imports():
            from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSForConditionalGeneration

        config = Qwen3TTSConfig.from_pretrained(str(self.checkpoint))
        config._attn_implementation = "eager"
        for sub in _sub_configs(config):
            sub._attn_implementation = "eager"
        with init_empty_weights(include_buffers=False):
            self.model = Qwen3TTSForConditionalGeneration(config)
        self.model.eval()

    def parameter_names(self, prefixes: tuple[str, ...]) -> list[str]:
        return [n for n, _ in self.model.named_parameters() if n.startswith(prefixes)]

    @contextlib.contextmanager
    def loaded(self, prefixes: tuple[str, ...]) -> Iterator[Any]:
        """The model with the parameters under `prefixes` loaded (float32, CPU) for the block."""
        names = self.parameter_names(prefixes)
        if not names:
            raise ValueError(f"no parameters under {prefixes}")
        try:
            self._load(prefixes, names)
            yield self.model
        finally:
            self._unload(names)

    def _load(self, prefixes: tuple[str, ...], names: list[str]) -> None:
        missing = [n for n in names if n not in self._files]
        if missing:
            raise CheckpointError(
                f"{self.checkpoint}: {len(missing)} weights missing from the safetensors files, e.g. {missing[0]}"
            )
        # A tensor the module has no parameter for (e.g. a persistent buffer) would be silently
        # ignored here while from_pretrained loads it: refuse instead of exporting a different model.
        wanted = set(names)
        unexpected = [n for n in self._files if n.startswith(prefixes) and n not in wanted]
        if unexpected:
            raise CheckpointError(f"{self.checkpoint}: unexpected tensor {unexpected[0]} (not a parameter of the model)")
        load_tensors(self.model, names, self._files, self.checkpoint)

    def _unload(self, names: list[str]) -> None:
        unload_tensors(self.model, names)

    @contextlib.contextmanager
    def speech_tokenizer(self) -> Iterator[Any]:
        """The speech tokenizer model (Qwen3TTSTokenizerV2Model, float32) for the block, as
        `Qwen3TTSModel.from_pretrained` loads it; freed after the block once the caller holds no
        reference to it (export runs each stage in its own function for that)."""
        import torch

        with reference_imports():
            from qwen_tts import Qwen3TTSTokenizer

        tokenizer = Qwen3TTSTokenizer.from_pretrained(
            str(self.checkpoint / "speech_tokenizer"), dtype=torch.float32, device_map="cpu"
        )
        tokenizer.model.eval()
        yield tokenizer.model


def _sub_configs(config: Any) -> list[Any]:
    talker = getattr(config, "talker_config", None)
    subs = [talker, getattr(talker, "code_predictor_config", None), getattr(config, "speaker_encoder_config", None)]
    return [c for c in subs if c is not None]
