"""Talker prompt construction in embedding space (numpy), mirroring the reference exactly.

Reference: Qwen3TTSForConditionalGeneration.generate and generate_icl_prompt in
qwen_tts/core/models/modeling_qwen3_tts.py. Token ids are sliced positionally there ([:3] is the
`<|im_start|>assistant\\n` role, [3:-5] the text), and so they are here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ttscore.contract.errors import InvalidRequest
from ttscore.runtime.families.qwen3_tts.checkpoint import Qwen3TTSInfo
from ttscore.runtime.families.qwen3_tts.request import ResolvedRequest
from ttscore.runtime.families.qwen3_tts.tokenizer import (
    TextTokenizer,
    assistant_text,
    instruct_text,
    ref_text,
)


@dataclass
class Tables:
    text: NDArray[Any]  # [text_vocab, H]  projected text embeddings
    codec: NDArray[Any]  # [codec_vocab, H] talker codec embeddings
    groups: NDArray[Any]  # [G-1, codebook, H] code-predictor codec embeddings

    def frame_embeddings(self, codes: NDArray[Any]) -> NDArray[Any]:
        """Sum of the G group embeddings of each frame: codes [T, G] -> [T, H]."""
        out = self.codec[codes[:, 0]].astype(np.float32)
        for g in range(1, codes.shape[1]):
            out = out + self.groups[g - 1][codes[:, g]]
        summed: NDArray[Any] = out
        return summed


@dataclass
class Prompt:
    embeds: NDArray[Any]  # [L, H] talker prefill input
    trailing: NDArray[Any]  # [N, H] text embeddings added to the generated frames, in order
    pad: NDArray[Any]  # [H] tts_pad embedding, added once `trailing` is used up
    text_tokens: int  # tokens of the synthesized text plus instructions (usage)
    audio_tokens: int  # reference codec frames fed in context (usage)


def build_prompt(
    req: ResolvedRequest, info: Qwen3TTSInfo, tables: Tables, tokenizer: TextTokenizer
) -> Prompt:
    T = tables.text
    C = tables.codec
    ids = tokenizer.encode(assistant_text(req.text))
    if len(ids) < 9:
        # role (3) + at least one text token + <|im_end|>\n<|im_start|>assistant\n (5)
        raise InvalidRequest("input text produced no tokens", "input")
    st = info.special_text_ids
    cid = info.codec_ids
    tts_bos, tts_eos, tts_pad = T[st["tts_bos"]], T[st["tts_eos"]], T[st["tts_pad"]]

    parts: list[NDArray[Any]] = []
    n_instruct = 0
    if req.instructions:
        ins_ids = tokenizer.encode(instruct_text(req.instructions))
        n_instruct = max(0, len(ins_ids) - 5)  # content only: minus <|im_start|>user\n, <|im_end|>\n
        parts.append(T[ins_ids])

    if req.x_vector is not None:
        speaker = req.x_vector.reshape(1, -1).astype(np.float32)
    elif req.speaker_id is not None:
        speaker = C[[req.speaker_id]]
    else:
        speaker = None

    if req.language_id is None:
        prefill = [cid["nothink"], cid["think_bos"], cid["think_eos"]]
    else:
        prefill = [cid["think"], cid["think_bos"], req.language_id, cid["think_eos"]]
    codec_rows = [C[prefill]]
    if speaker is not None:
        codec_rows.append(speaker)
    codec_rows.append(C[[cid["pad"], cid["bos"]]])
    codec = np.concatenate(codec_rows, axis=0)  # [L, H]
    L = codec.shape[0]

    role = T[ids[:3]]
    lead = np.concatenate([np.repeat(tts_pad[None], L - 2, axis=0), tts_bos[None]], axis=0) + codec[:-1]
    talker = [role, lead]
    text_ids = ids[3:-5]
    audio_tokens = 0
    if req.ref_codes is not None:
        r_ids = tokenizer.encode(ref_text(req.ref_text or ""))
        ref_ids = r_ids[3:-2]
        text_embed = np.concatenate([T[ref_ids + text_ids], tts_eos[None]], axis=0)
        codec_embed = np.concatenate([C[[cid["bos"]]], tables.frame_embeddings(req.ref_codes)], axis=0)
        audio_tokens = int(req.ref_codes.shape[0])
        t_len, c_len = text_embed.shape[0], codec_embed.shape[0]
        if req.non_streaming_mode:
            icl = np.concatenate([text_embed + C[cid["pad"]], codec_embed + tts_pad], axis=0)
            trailing = tts_pad[None]
        elif t_len > c_len:
            icl = text_embed[:c_len] + codec_embed
            trailing = text_embed[c_len:]
        else:
            padded = np.concatenate([text_embed, np.repeat(tts_pad[None], c_len - t_len, axis=0)], axis=0)
            icl = padded + codec_embed
            trailing = tts_pad[None]
        talker.append(icl)
    elif req.non_streaming_mode:
        body = np.concatenate([T[text_ids], tts_eos[None]], axis=0) + C[cid["pad"]]
        talker += [body, (tts_pad + C[cid["bos"]])[None]]
        trailing = tts_pad[None]
    else:
        talker.append(T[ids[3:4]] + codec[-1:])
        trailing = np.concatenate([T[ids[4:-5]], tts_eos[None]], axis=0)

    parts.append(np.concatenate(talker, axis=0))
    embeds = np.concatenate(parts, axis=0).astype(np.float32)
    return Prompt(
        embeds=embeds,
        trailing=trailing.astype(np.float32),
        pad=tts_pad.astype(np.float32),
        text_tokens=len(text_ids) + n_instruct,
        audio_tokens=audio_tokens,
    )
