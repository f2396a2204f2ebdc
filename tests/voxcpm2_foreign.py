"""A VoxCPM2 checkpoint the project did not create: nothing here comes from export/voxcpm2/tiny.py.

`independent_checkpoint(out)` builds the reference package's own config objects (VoxCPMConfig with
its MiniCPM4Config, RopeScalingConfig, VoxCPMEncoderConfig, VoxCPMDitConfig + CFM config and
AudioVAEConfigV2, taken from the pydantic field annotations of VoxCPMConfig), instantiates the
reference VoxCPM2Model with its modules' own (torch default) initialization under a seeded torch
RNG, and writes the on-disk layout `VoxCPM2Model.from_local` reads. The reference has no save path,
so the files are: config.json = `VoxCPMConfig.model_dump_json()`, model.safetensors /
audiovae.safetensors = the module state dict split at `audio_vae.` (as from_local joins them), and a
tokenizer trained here with `tokenizers` (BPE trainer, Metaspace pre-tokenizer, on its own corpus)
and saved by `transformers.LlamaTokenizerFast.save_pretrained`.

Its dimensions differ from make-tiny's on purpose (make-tiny: LM 64 wide, 2 layers, 4/2 heads, muP,
LongRoPE past the original length, residual 1 layer without RoPE, local modules 32 wide, patch 4,
latent 16, VAE encoder rates 2.5.8.8 and decoder rates 8.6.5.2.2.2, decoder 128 channels):
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# The differences from make-tiny, stated once (the test module asserts them against the files).
LM = {"hidden_size": 96, "intermediate_size": 160, "num_hidden_layers": 3, "num_attention_heads": 6,
      "num_key_value_heads": 3, "kv_channels": 24, "use_mup": False, "max_position_embeddings": 2048}
PATCH_SIZE = 2
FEAT_DIM = 12
RESIDUAL_LAYERS = 2
ENCODER = {"hidden_dim": 40, "ffn_dim": 72, "num_heads": 3, "num_layers": 1, "kv_channels": 24}
DIT = {"hidden_dim": 56, "ffn_dim": 88, "num_heads": 3, "num_layers": 3, "kv_channels": 24}
VAE = {"encoder_dim": 4, "encoder_rates": [4, 4, 5, 8], "latent_dim": FEAT_DIM, "decoder_dim": 48,
       "decoder_rates": [6, 8, 5, 4, 2]}  # still 640 samples at 16 kHz / 1920 at 48 kHz per frame

LAST_CONV_SCALE = 0.05
INPUT_CONV_SCALE = 10.0

_CORPUS = [
    "A quick brown fox jumps over the lazy dog near the river bank.",
    "She sells sea shells by the sea shore, and the shells she sells are surely sea shells.",
    "Independent checkpoints keep an exporter honest about what it assumes.",
    "Cloned voices follow the reference audio; plain voices follow the model.",
    "Numbers like 12, 345 and 6789 are read aloud. Questions? Answers! Quotes: 'yes' \"no\".",
    "北京欢迎你。今天天气很好。我们一起说话。",
]
_SPECIAL = ["<unk>", "<s>", "</s>"]
# VoxCPM2 hard-wires ids 101..104 (audio start/end, reference start/end): keep them off text.
_RESERVED = [f"<reserved_{i}>" for i in range(len(_SPECIAL), 110)]


def build_tokenizer(out: Path) -> Any:
    """Train a small SentencePiece-style BPE and save it as a LlamaTokenizerFast into `out`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=_SPECIAL + _RESERVED, show_progress=False,
                                  initial_alphabet=list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                        "0123456789.,;:!?'\"-()"))
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    fast = LlamaTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                              add_bos_token=True, add_eos_token=False)
    fast.save_pretrained(str(out))
    return fast


def independent_checkpoint(out: Path, seed: int = 2024) -> Path:
    """Write the checkpoint into `out` (created) and return it."""
    import re

    import torch
    from safetensors.torch import save_file

    from export.voxcpm2.reference import reference_classes  # only the reference package's classes

    c = reference_classes()
    fields = c["config"].model_fields
    lm_cls = fields["lm_config"].annotation
    rope_cls = lm_cls.model_fields["rope_scaling"].annotation
    enc_cls = fields["encoder_config"].annotation
    dit_cls = fields["dit_config"].annotation
    cfm_cls = dit_cls.model_fields["cfm_config"].annotation

    out.mkdir(parents=True)
    tokenizer = build_tokenizer(out)
    half = LM["kv_channels"] // 2
    rope = rope_cls(type="longrope", long_factor=[1.0 + 0.5 * i for i in range(half)],
                    short_factor=[1.0 + 0.1 * i for i in range(half)],
                    original_max_position_embeddings=LM["max_position_embeddings"])
    lm = lm_cls(bos_token_id=1, eos_token_id=2, rms_norm_eps=1e-6, rope_theta=50000.0, rope_scaling=rope,
                vocab_size=len(tokenizer), scale_emb=3.0, dim_model_base=48, scale_depth=1.2, **LM)
    config = c["config"](
        lm_config=lm,
        patch_size=PATCH_SIZE,
        feat_dim=FEAT_DIM,
        residual_lm_num_layers=RESIDUAL_LAYERS,
        residual_lm_no_rope=False,
        scalar_quantization_latent_dim=20,
        scalar_quantization_scale=7,
        encoder_config=enc_cls(**ENCODER),
        dit_config=dit_cls(**DIT, cfm_config=cfm_cls(inference_cfg_rate=2.0)),
        audio_vae_config=c["vae_config"](**VAE),
        max_length=256,
        dtype="float32",
    )
    torch.manual_seed(seed)
    vae = c["vae"](config=config.audio_vae_config)
    model = c["model"](config, tokenizer, vae, device="cpu")
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    # Three changes to the default initialization, all to keep a parity test meaningful:
    # - torch's default init drives the AudioVAE decoder deep into its final tanh (|audio| ~ 1
    #   everywhere), which would hide decoder errors: the last conv's weight norm and bias are scaled
    #   down so the waveform stays in tanh's linear range;
    # - with default init the decoder's biases dominate its output (the latents move the waveform
    #   by ~10 %): the input conv's weight norm is scaled up so the latents matter (~40 %);
    # - the default stop head's two logits differ by ~1e-3, so float rounding could flip the stop
    #   decision: it is zeroed (an exact tie, argmax 0 = continue in torch and numpy alike), and a
    #   generation runs to the length cap it is given.
    convs = [int(m.group(1)) for k in state if (m := re.fullmatch(r"audio_vae\.decoder\.model\.(\d+)\.weight_g", k))]
    for name in (f"audio_vae.decoder.model.{max(convs)}.weight_g", f"audio_vae.decoder.model.{max(convs)}.bias"):
        state[name] = state[name] * LAST_CONV_SCALE
    first = f"audio_vae.decoder.model.{min(convs)}.weight_g"
    state[first] = state[first] * INPUT_CONV_SCALE
    state["stop_head.weight"] = torch.zeros_like(state["stop_head.weight"])
    prefix = "audio_vae."
    save_file({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}, str(out / "audiovae.safetensors"))
    save_file({k: v for k, v in state.items() if not k.startswith(prefix)}, str(out / "model.safetensors"))
    (out / "config.json").write_text(config.model_dump_json(indent=2), encoding="utf-8")
    return out
