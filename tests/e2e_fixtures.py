"""The end-to-end Triton deployment, shared by the e2e test modules (registered in conftest.py).

`e2e_triton`: the real tritonserver rendered exactly as `triton-tts serve` renders it for a mixed
deployment: a greedy CustomVoice, a VoiceDesign and a greedy Base tiny Qwen3-TTS checkpoint (one
shared code2wav, the voice_features ensemble), a tiny VoxCPM2 checkpoint (its audiovae_decoder
and audiovae_encoder), a tiny OmniVoice checkpoint (its codec decoder inline) and an OmniVoice
checkpoint the project did not make, a tiny Gepard-1.0 (its speech_generation alone) and a Gepard-1.0
the project did not create (tests/gepard_foreign.py), a tiny Voxtral TTS (its codec inline) and a
Voxtral TTS the project did not create (tests/voxtral_tts_foreign.py), a tiny Fish Speech S2 Pro (its DAC
decoder inline, its dac_encoder) and a Fish Speech the project did not create (tests/fish_speech_foreign.py),
a tiny CosyVoice3 (its hop-stream vocoder inline, its prompt_encoder) and a CosyVoice3 the project did not
create (tests/cosyvoice3_foreign.py), a tiny MOSS-TTS-Nano (its codec decoder inline, its moss_codec_encoder)
and a MOSS-TTS-Nano the project did not create (tests/moss_tts_nano_fixtures.py), one request at a time per model.
Keys: the Qwen3-TTS variant, "voxcpm2", "omnivoice", "omnivoice_foreign", "gepard", "gepard_foreign",
"voxtral_tts", "voxtral_tts_foreign", "fish_speech", "fish_speech_foreign", "cosyvoice3", "cosyvoice3_foreign",
"moss_tts_nano" or "moss_tts_nano_foreign".
Started once per session; each e2e module runs its own gateway(s) against it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from cosyvoice3_fixtures import *  # noqa: F403  (cosyvoice3_tiny, cosyvoice3_artifacts, cosyvoice3_foreign, ...)
from fish_speech_fixtures import *  # noqa: F403  (fish_tiny, fish_artifacts, fish_foreign, ...: fixtures of e2e_triton)
from gepard_fixtures import *  # noqa: F403  (gepard_tiny, gepard_artifacts: fixtures of e2e_triton)
from moss_tts_nano_fixtures import *  # noqa: F403  (moss_tiny, moss_artifacts, moss_foreign, ...: fixtures of e2e_triton)
from omnivoice_fixtures import *  # noqa: F403  (its session fixtures, which e2e_triton takes)
from voxtral_tts_fixtures import *  # noqa: F403  (voxtral_tiny, voxtral_artifacts, voxtral_foreign, ...: fixtures of e2e_triton)


@pytest.fixture(scope="session")
def e2e_triton(session_triton_server, tmp_path_factory, tiny_custom_voice_greedy, tiny_voice_design, tiny_base_greedy,
               voxcpm2_tiny, voxcpm2_artifacts, omnivoice_tiny, omnivoice_artifacts, omnivoice_foreign,
               omnivoice_foreign_artifacts, gepard_tiny, gepard_artifacts, gepard_foreign,
               gepard_foreign_artifacts, voxtral_tiny, voxtral_artifacts, voxtral_foreign,
               voxtral_foreign_artifacts, fish_tiny, fish_artifacts, fish_foreign,
               fish_foreign_artifacts, cosyvoice3_tiny, cosyvoice3_artifacts, cosyvoice3_foreign,
               cosyvoice3_foreign_artifacts, moss_tiny, moss_artifacts, moss_foreign,
               moss_foreign_artifacts) -> dict[str, Any]:
    from gateway_fixtures import render_stack_repository

    from ttscore.runtime.families import load_model

    work = tmp_path_factory.mktemp("e2e")
    variants = {"custom_voice": tiny_custom_voice_greedy, "voice_design": tiny_voice_design, "base": tiny_base_greedy,
                "voxcpm2": (voxcpm2_tiny, voxcpm2_artifacts, load_model(voxcpm2_artifacts)),
                "omnivoice": (omnivoice_tiny, omnivoice_artifacts, load_model(omnivoice_artifacts)),
                "omnivoice_foreign": (omnivoice_foreign, omnivoice_foreign_artifacts,
                                      load_model(omnivoice_foreign_artifacts)),
                "gepard": (gepard_tiny, gepard_artifacts, load_model(gepard_artifacts)),
                "gepard_foreign": (gepard_foreign, gepard_foreign_artifacts, load_model(gepard_foreign_artifacts)),
                "voxtral_tts": (voxtral_tiny, voxtral_artifacts, load_model(voxtral_artifacts)),
                "voxtral_tts_foreign": (voxtral_foreign, voxtral_foreign_artifacts,
                                        load_model(voxtral_foreign_artifacts)),
                "fish_speech": (fish_tiny, fish_artifacts, load_model(fish_artifacts)),
                "fish_speech_foreign": (fish_foreign, fish_foreign_artifacts, load_model(fish_foreign_artifacts)),
                "cosyvoice3": (cosyvoice3_tiny, cosyvoice3_artifacts, load_model(cosyvoice3_artifacts)),
                "cosyvoice3_foreign": (cosyvoice3_foreign, cosyvoice3_foreign_artifacts,
                                       load_model(cosyvoice3_foreign_artifacts)),
                "moss_tts_nano": (moss_tiny, moss_artifacts, load_model(moss_artifacts)),
                "moss_tts_nano_foreign": (moss_foreign, moss_foreign_artifacts, load_model(moss_foreign_artifacts))}
    pairs = [(t[0], t[1]) for t in variants.values()]
    # One request at a time per model: a request that was not cancelled would block the next one.
    repo, cfg = render_stack_repository(work, pairs, max_active=1)
    server = session_triton_server(repo, ready_timeout_s=180)
    cfg["triton_url"] = server.grpc_url
    (work / "gateway.json").write_text(json.dumps(cfg, indent=2))
    return {
        "server": server,
        "repo": repo,
        "config": cfg,
        "work": work,
        "names": dict(zip(variants, (m["name"] for m in cfg["models"]), strict=True)),
        "triton_models": dict(zip(variants, (m["triton_model"] for m in cfg["models"]), strict=True)),
        "checkpoints": {v: t[0] for v, t in variants.items()},
        "artifacts": {v: t[1] for v, t in variants.items()},
        "pipelines": {v: t[2] for v, t in variants.items()},
    }
