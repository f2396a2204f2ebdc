"""Long text as vLLM-Omni 0.30.0 hands it to MOSS-TTS-Nano (the remote code's voice-clone defaults): the text is
cut into chunks of at most CHUNK_MAX_TEXT_TOKENS SentencePiece tokens, each generated from its own prompt and
decoded on its own, with a pause after every chunk but the last. A text that makes one chunk is used exactly as
given; only a split text is normalised.

Normalising (before the split): outer whitespace removed, line breaks to spaces, runs of spaces to one. Text with
CJK characters gets "。" when it does not end in a sentence mark; other text gets its first character upper-cased
and "." after a final letter or digit (and 8 leading spaces when it has fewer than 5 words, which the split's
stripping then removes again).

Splitting: at sentence marks (each keeping the closing quotes or brackets that follow it); a sentence over the
budget at clause marks; a clause still over it into the longest prefixes within the budget, each cut back to the
last space or mark among its final 25 characters where there is one. The pieces are then packed greedily into
chunks within the budget (joined by a space, or by nothing when either side has CJK characters).
"""

from __future__ import annotations

from collections.abc import Callable

from ttscore.contract.moss_tts_nano import rules

SENTENCE_MARKS = frozenset(".!?。！？；;")
CLAUSE_MARKS = frozenset(",，、；;：:")
CLOSERS = frozenset("\"'”’)]}）】》」』")
BOUNDARIES = SENTENCE_MARKS | CLAUSE_MARKS | {" "}
CUT_BACK_CHARS = 25  # how far back a budget cut looks for a boundary

Count = Callable[[str], int]  # a text's SentencePiece token count


def has_cjk(text: str) -> bool:
    return any("\u4e00" <= c <= "\u9fff" or "\u3400" <= c <= "\u4dbf" or "\u3040" <= c <= "\u30ff"
               or "\uac00" <= c <= "\ud7af" for c in text)


def normalise(text: str) -> str:
    """The text as the split sees it (module docstring); ValueError when it is blank."""
    out = text.strip()
    if not out:
        raise ValueError("Text prompt cannot be empty.")
    out = out.replace("\n", " ").replace("\r", " ")
    while "  " in out:
        out = out.replace("  ", " ")
    if has_cjk(out):
        return out if out[-1] in SENTENCE_MARKS else out + "。"
    if not out[0].isupper():
        out = out[0].upper() + out[1:]
    if out[-1].isalnum():
        out += "."
    if len(out.split()) < 5:
        out = " " * 8 + out
    return out


def split_at(text: str, marks: frozenset[str]) -> list[str]:
    """Pieces ending at each mark (with the closers right after it), stripped; the rest is the last piece."""
    pieces: list[str] = []
    start = i = 0
    n = len(text)
    while i < n:
        if text[i] in marks:
            end = i + 1
            while end < n and text[end] in CLOSERS:
                end += 1
            if text[start:end].strip():
                pieces.append(text[start:end].strip())
            while end < n and text[end].isspace():
                end += 1
            start = i = end
            continue
        i += 1
    if text[start:].strip():
        pieces.append(text[start:].strip())
    return pieces


def split_by_budget(text: str, count: Count, budget: int) -> list[str]:
    """`text` cut into consecutive pieces of at most `budget` tokens (module docstring)."""
    rest = text.strip()
    pieces: list[str] = []
    while rest:
        if count(rest) <= budget:
            pieces.append(rest)
            break
        lo, hi, best = 1, len(rest), 1  # the longest prefix within the budget (by bisection on its length)
        while lo <= hi:
            mid = (lo + hi) // 2
            head = rest[:mid].strip()
            if head and count(head) <= budget:
                best, lo = mid, mid + 1
            elif head:
                hi = mid - 1
            else:
                lo = mid + 1
        cut = best
        for j in range(best - 1, max(-1, best - CUT_BACK_CHARS), -1):
            if rest[j] in BOUNDARIES:
                cut = j + 1
                break
        piece = rest[:cut].strip()
        if not piece:
            cut = best
            piece = rest[:best].strip()
        pieces.append(piece)
        rest = rest[cut:].strip()
    return pieces


def join(left: str, right: str) -> str:
    if not left or not right:
        return left or right
    return left + right if has_cjk(left) or has_cjk(right) else f"{left} {right}"


def split(text: str, count: Count, budget: int = rules.CHUNK_MAX_TEXT_TOKENS) -> list[str]:
    """The normalised text's chunks of at most `budget` tokens where the pieces allow (module docstring)."""
    prepared = normalise(text)
    pieces: list[tuple[int, str]] = []
    for sentence in split_at(prepared, SENTENCE_MARKS) or [prepared.strip()]:
        n = count(sentence)
        if n <= budget:
            pieces.append((n, sentence))
            continue
        clauses = split_at(sentence, CLAUSE_MARKS)
        for clause in clauses if len(clauses) > 1 else [sentence]:
            n = count(clause)
            if n <= budget:
                pieces.append((n, clause))
            else:
                pieces += [(count(p), p) for p in split_by_budget(clause, count, budget)]
    chunks: list[str] = []
    current, tokens = "", 0
    for n, piece in pieces:
        if not current:
            current, tokens = piece, n
        elif tokens + n > budget:
            chunks.append(current.strip())
            current, tokens = piece, n
        else:
            current = join(current, piece)
            tokens = count(current)
    if current:
        chunks.append(current.strip())
    return chunks or [prepared.strip()]


def text_chunks(text: str, count: Count, budget: int = rules.CHUNK_MAX_TEXT_TOKENS) -> list[str]:
    """What is generated, chunk by chunk: the split when it makes several chunks, else the text as given."""
    chunks = split(text, count, budget)
    return chunks if len(chunks) > 1 else [text]


def pause_samples(chunk: str, sample_rate: int) -> int:
    """The silence after a chunk that is not the last: longer after a short one (at most SHORT_CHUNK_WORDS words)."""
    seconds = rules.SHORT_CHUNK_PAUSE_SECONDS if len(chunk.split()) <= rules.SHORT_CHUNK_WORDS else rules.PAUSE_SECONDS
    return max(0, round(sample_rate * seconds))
