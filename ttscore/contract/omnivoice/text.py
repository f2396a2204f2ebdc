"""OmniVoice's text rules, pure Python (the gateway and the runtime both apply them): the frame-count
estimate (the reference's rule-based duration estimator: per-character phonetic weights, a speaking
rate anchored on a reference transcript and its frames, a power-curve boost below 50 frames), the
prompt text, and the voice-design vocabulary (`instructions`)."""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Mapping
from functools import lru_cache

from ttscore.contract.errors import InvalidRequest

# --- duration -------------------------------------------------------------------------------------
# Relative speaking time of one character, by script (1.0 = one Latin letter).
_SCRIPT_WEIGHT = {
    "cjk": 3.0, "hangul": 2.5, "kana": 2.2, "ethiopic": 3.0, "yi": 3.0, "indic": 1.8, "thai_lao": 1.5,
    "khmer_myanmar": 1.8, "arabic": 1.5, "hebrew": 1.5, "latin": 1.0, "cyrillic": 1.0, "greek": 1.0,
    "armenian": 1.0, "georgian": 1.0, "default": 1.0,
}
PUNCTUATION_WEIGHT, SPACE_WEIGHT, DIGIT_WEIGHT, MARK_WEIGHT = 0.5, 0.2, 3.5, 0.0

# Unicode blocks up to 0xFFEF as (last code point, script), contiguous blocks of one script merged;
# a code point takes the first block whose end is >= it.
_BLOCKS: tuple[tuple[int, str], ...] = (
    (0x02AF, "latin"), (0x03FF, "greek"), (0x052F, "cyrillic"), (0x058F, "armenian"), (0x05FF, "hebrew"),
    (0x08FF, "arabic"), (0x0DFF, "indic"), (0x0EFF, "thai_lao"), (0x0FFF, "indic"), (0x109F, "khmer_myanmar"),
    (0x10FF, "georgian"), (0x11FF, "hangul"), (0x139F, "ethiopic"), (0x177F, "default"),
    (0x17FF, "khmer_myanmar"), (0x18FF, "default"), (0x19DF, "indic"), (0x19FF, "khmer_myanmar"),
    (0x1C7F, "indic"), (0x1C8F, "cyrillic"), (0x1CBF, "georgian"), (0x1CFF, "indic"), (0x1DBF, "latin"),
    (0x1DFF, "default"), (0x1EFF, "latin"), (0x30FF, "kana"), (0x312F, "cjk"), (0x318F, "hangul"),
    (0x9FFF, "cjk"), (0xA4CF, "yi"), (0xA4FF, "default"), (0xA63F, "default"), (0xA69F, "cyrillic"),
    (0xA6FF, "default"), (0xA7FF, "latin"), (0xA82F, "indic"), (0xA87F, "default"), (0xA95F, "indic"),
    (0xA97F, "hangul"), (0xA9DF, "indic"), (0xA9FF, "khmer_myanmar"), (0xAA5F, "indic"),
    (0xAA7F, "khmer_myanmar"), (0xAAFF, "indic"), (0xAB2F, "ethiopic"), (0xAB6F, "latin"), (0xABBF, "default"),
    (0xABFF, "indic"), (0xD7AF, "hangul"), (0xFAFF, "cjk"), (0xFDFF, "arabic"), (0xFE6F, "default"),
    (0xFEFF, "arabic"), (0xFFEF, "latin"),
)
_BLOCK_ENDS = [end for end, _ in _BLOCKS]
TATWEEL = 0x0640
LOW_FRAMES = 50.0  # below this many frames the estimate is boosted (short texts are spoken slower)
BOOST = 3.0  # the boost's power: low * (est / low) ** (1 / BOOST)


@lru_cache(maxsize=8192)
def char_weight(ch: str) -> float:
    code = ord(ch)
    if 65 <= code <= 90 or 97 <= code <= 122:
        return _SCRIPT_WEIGHT["latin"]
    if code == 32:
        return SPACE_WEIGHT
    if code == TATWEEL:
        return MARK_WEIGHT
    category = unicodedata.category(ch)
    kind = category[0]
    if kind == "M":
        return MARK_WEIGHT
    if kind in "PS":
        return PUNCTUATION_WEIGHT
    if kind == "Z":
        return SPACE_WEIGHT
    if kind == "N":
        return DIGIT_WEIGHT
    i = bisect.bisect_left(_BLOCK_ENDS, code)
    if i < len(_BLOCKS):
        return _SCRIPT_WEIGHT[_BLOCKS[i][1]]
    return _SCRIPT_WEIGHT["cjk"] if code > 0x20000 else _SCRIPT_WEIGHT["default"]


def text_weight(text: str) -> float:
    return sum(char_weight(c) for c in text)


def estimate_frames(text: str, ref_text: str | None, ref_frames: int | None, anchor_text: str, anchor_frames: int,
                    speed: float = 1.0) -> int:
    """The target's frame count: `text`'s weight at the speaking rate of (ref_text, ref_frames), or
    of the anchor when there is no reference transcript; divided by `speed`; at least 1."""
    if ref_frames is None or not ref_text:
        ref_text, ref_frames = anchor_text, anchor_frames
    est = 0.0
    ref_weight = text_weight(ref_text)
    if ref_frames > 0 and ref_weight != 0:
        est = text_weight(text) / (ref_weight / ref_frames)
        if est < LOW_FRAMES:
            est = LOW_FRAMES * (est / LOW_FRAMES) ** (1.0 / BOOST)
    if speed > 0 and speed != 1.0:
        est = est / speed
    return max(1, int(est))


# --- prompt text ----------------------------------------------------------------------------------
_CJK = r"[\u4e00-\u9fff]"
NONVERBAL_TAGS = ("laughter", "sigh", "confirmation-en", "question-en", "question-ah", "question-oh", "question-ei",
                  "question-yi", "surprise-ah", "surprise-oh", "surprise-wa", "surprise-yo", "dissatisfaction-hnn")
NONVERBAL = re.compile(r"\[(?:" + "|".join(re.escape(t) for t in NONVERBAL_TAGS) + r")\]")


def prompt_text(text: str, ref_text: str | None) -> str:
    """The text the model reads: the reference transcript and the text joined by a space, newlines
    dropped, full-width parentheses made ASCII, runs of spaces/tabs collapsed, no space beside a CJK
    character."""
    joined = f"{ref_text.strip()} {text.strip()}" if ref_text else text.strip()
    joined = re.sub(r"[\r\n]+", "", joined).replace("\uff08", "(").replace("\uff09", ")")
    joined = re.sub(r"[ \t]+", " ", joined)
    return re.sub(rf"(?<={_CJK})\s+|\s+(?={_CJK})", "", joined)


# The reference's END_PUNCTUATION (its two-character "……" can never be a text's last character).
END_PUNCTUATION = frozenset(";:,.!?…)]}\"'“”‘’；：，。！？、）】")


def clone_ref_text(ref_text: str) -> str:
    """A cloning transcript as the reference's create_voice_clone_prompt leaves it (add_punctuation):
    stripped, and ended with "." ("。" when it has a CJK character) unless it ends in punctuation."""
    text = ref_text.strip()
    if text and text[-1] not in END_PUNCTUATION:
        text += "。" if re.search(_CJK, text) else "."
    return text


def split_nonverbal(text: str) -> list[str]:
    """`text` cut around its non-verbal tags ("[laughter]"), each tag a piece of its own (each
    piece is tokenized alone), empty pieces dropped."""
    pieces, last = [], 0
    for m in NONVERBAL.finditer(text):
        pieces += [text[last:m.start()], m.group()]
        last = m.end()
    pieces.append(text[last:])
    return [p for p in pieces if p]


# --- voice design (`instructions`) ----------------------------------------------------------------
# Categories of mutually exclusive items, (English, Chinese) where both exist.
_PAIRED: tuple[tuple[tuple[str, str], ...], ...] = (
    (("male", "男"), ("female", "女")),
    (("child", "儿童"), ("teenager", "少年"), ("young adult", "青年"), ("middle-aged", "中年"), ("elderly", "老年")),
    (("very low pitch", "极低音调"), ("low pitch", "低音调"), ("moderate pitch", "中音调"), ("high pitch", "高音调"),
     ("very high pitch", "极高音调")),
    (("whisper", "耳语"),),
)
ACCENTS = tuple(f"{a} accent" for a in ("american", "british", "australian", "chinese", "canadian", "indian",
                                           "korean", "portuguese", "russian", "japanese"))
DIALECTS = tuple(f"{d}话" for d in ("河南", "陕西", "四川", "贵州", "云南", "桂林", "济南", "石家庄", "甘肃", "宁夏",
                                    "青岛", "东北"))
EN_TO_ZH = {en: zh for cat in _PAIRED for en, zh in cat}
ZH_TO_EN = {zh: en for en, zh in EN_TO_ZH.items()}
EXCLUSIVE: tuple[frozenset[str], ...] = (*(frozenset(x for pair in cat for x in pair) for cat in _PAIRED),
                                         frozenset(ACCENTS), frozenset(DIALECTS))
VALID_ITEMS = frozenset(EN_TO_ZH) | frozenset(ZH_TO_EN) | frozenset(ACCENTS) | frozenset(DIALECTS)
_HAN = re.compile(_CJK)


def has_chinese(text: str) -> bool:
    return bool(_HAN.search(text))


def resolve_instructions(instructions: str | None, chinese_text: bool, field: str = "instructions") -> str | None:
    """The voice-design items normalized as the reference does (lower case; all Chinese when the text
    is Chinese or a dialect is named, all English when an accent is; joined by ", " or "，"), or None
    for none; InvalidRequest naming `field` for an unknown item, a dialect with an accent, or two
    items of one category."""
    if instructions is None or not instructions.strip():
        return None
    items = [x for x in re.split(r"\s*[,，]\s*", instructions.strip()) if x]
    norm = [x.strip().lower() for x in items]
    unknown = [raw for raw, n in zip(items, norm, strict=True) if n not in VALID_ITEMS]
    if unknown:
        raise InvalidRequest(f"unsupported voice-design item(s) {', '.join(repr(u) for u in unknown)}; valid: "
                             f"{', '.join(sorted(i for i in VALID_ITEMS if not has_chinese(i)))} (or their Chinese "
                             f"forms, and Chinese dialects)", field)
    dialect = any(n.endswith("话") for n in norm)
    accent = any(" accent" in n for n in norm)
    if dialect and accent:
        raise InvalidRequest("a Chinese dialect and an English accent cannot be mixed", field)
    chinese = True if dialect else False if accent else chinese_text
    norm = [EN_TO_ZH.get(n, n) for n in norm] if chinese else [ZH_TO_EN.get(n, n) for n in norm]
    clashes = [[n for n in norm if n in cat] for cat in EXCLUSIVE]
    clashes = [c for c in clashes if len(c) > 1]
    if clashes:
        raise InvalidRequest("at most one item per category (gender, age, pitch, style, accent, dialect): "
                             + "; ".join(" vs ".join(repr(x) for x in c) for c in clashes), field)
    return ("，" if any(has_chinese(n) for n in norm) else ", ").join(norm)


# --- long text ------------------------------------------------------------------------------------
MIN_CHUNK_CHARS = 3
SPLIT_MARKS = frozenset(".,;:!?。，；：！？")
CLOSING_MARKS = frozenset("\"'“”‘’）]》>」】")
ABBREVIATIONS = frozenset(
    ["Mr.", "Mrs.", "Ms.", "Dr.", "Prof.", "Sr.", "Jr.", "Rev.", "Fr.", "Hon.", "Pres.", "Gov.", "Capt.", "Gen.", "Sen.", "Rep.", "Col.", "Maj.", "Lt.", "Cmdr.", "Sgt.", "Cpl.", "Co.", "Corp.", "Inc.", "Ltd.", "Est.", "Dept.", "St.", "Ave.", "Blvd.", "Rd.", "Mt.", "Ft.", "No.", "Jan.", "Feb.", "Mar.", "Apr.", "Aug.", "Sep.", "Sept.", "Oct.", "Nov.", "Dec.", "i.e.", "e.g.", "vs.", "Vs.", "Etc.", "approx.", "fig.", "def."])


def chunk_text(text: str, chunk_chars: int, min_chars: int = MIN_CHUNK_CHARS) -> list[str]:
    """The reference's long-text chunks: cut after each split mark (not after an abbreviation's
    period; a mark or closing quote that would open a piece joins the previous one), pieces packed
    greedily up to `chunk_chars` characters, then a piece under `min_chars` merged into its
    neighbour (the first into the second); stripped, empty ones dropped."""
    pieces: list[list[str]] = []
    current: list[str] = []
    for ch in text:
        if not current and pieces and (ch in SPLIT_MARKS or ch in CLOSING_MARKS):
            pieces[-1].append(ch)
            continue
        current.append(ch)
        if ch in SPLIT_MARKS:
            words = "".join(current).strip().split()
            if not (ch == "." and words and words[-1] in ABBREVIATIONS):
                pieces.append(current)
                current = []
    if current:
        pieces.append(current)
    packed: list[list[str]] = []
    chunk: list[str] = []
    for piece in pieces:
        if len(chunk) + len(piece) <= chunk_chars:
            chunk.extend(piece)
        else:
            if chunk:
                packed.append(chunk)
            chunk = piece
    if chunk:
        packed.append(chunk)
    first_short = bool(packed) and len(packed[0]) < min_chars
    final: list[list[str]] = []
    for i, chunk in enumerate(packed):
        if (i == 1 and first_short) or (len(chunk) < min_chars and final):
            final[-1].extend(chunk)
        else:
            final.append(chunk)
    return [s for s in ("".join(c).strip() for c in final) if s]


# --- language ---------------------------------------------------------------------------------------


def resolve_language(language: str | None, names: Mapping[str, str], family_name: str = "OmniVoice") -> str | None:
    """The language id the prompt names: None for "Auto", "None" or empty; a language id as it is;
    a language name (any case) by the reference's map `names` (name -> id). The reference falls back
    to no language for an unknown one; here it is refused naming the field."""
    if language is None or language.strip().lower() in ("", "auto", "none"):
        return None
    if language in set(names.values()):
        return language
    found = names.get(language.lower())
    if found is None:
        raise InvalidRequest(f"'language' {language!r} is not a language of {family_name} (a language name "
                             f"such as 'English' or an id such as 'en', or 'Auto')", "language")
    return found
