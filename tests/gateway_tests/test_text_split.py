"""The WebSocket text splitter: the spec's boundary rules, and chunking never changing the result."""

from __future__ import annotations

import random

import pytest

from gateway.text_split import GRANULARITIES, TextSplitter, check_granularity, split_text
from ttscore.contract.errors import InvalidRequest

pytestmark = pytest.mark.unit


def sentences(text: str) -> list[str]:
    return split_text(text, "sentence")


def clauses(text: str) -> list[str]:
    return split_text(text, "clause")


# --- granularity "none" ----------------------------------------------------------------------------


def test_none_keeps_the_whole_flush_as_one_unit():
    sp = TextSplitter("none")
    assert sp.feed("Hello there. How are you? ") == []
    assert sp.feed("Fine, thanks!") == []
    assert sp.flush() == ["Hello there. How are you? Fine, thanks!"]
    assert sp.flush() == []  # an empty buffer flushes to nothing (total_sentences 0)


def test_default_granularity_is_none_and_bad_values_are_400():
    assert TextSplitter().granularity == "none"
    assert check_granularity(None) == "none"
    assert check_granularity(" Sentence ") == "sentence"
    with pytest.raises(InvalidRequest) as e:
        TextSplitter("word")
    assert e.value.param == "split_granularity"
    assert set(GRANULARITIES) == {"none", "sentence", "clause"}


# --- sentence boundaries ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "units"),
    [
        ("Hello world. How are you? Fine!", ["Hello world.", "How are you?", "Fine!"]),
        ("One.Two. Three", ["One.Two.", "Three"]),  # ASCII marks need whitespace after them
        ("No punctuation at all", ["No punctuation at all"]),
        ("   ", []),
        ("", []),
        ("Line one.\nLine two.\tLine three.", ["Line one.", "Line two.", "Line three."]),
        ("Ends with a mark at the flush.", ["Ends with a mark at the flush."]),
        ("Non\u00a0breaking.\u00a0Space", ["Non\u00a0breaking.", "Space"]),
    ],
)
def test_sentence_boundaries(text, units):
    assert sentences(text) == units


@pytest.mark.parametrize(
    ("text", "units"),
    [
        ("Pi is 3.14 roughly. Yes", ["Pi is 3.14 roughly.", "Yes"]),
        ("It costs .5 dollars. Ok", ["It costs .5 dollars.", "Ok"]),
        ("Version 2.0.1 shipped. Good", ["Version 2.0.1 shipped.", "Good"]),
        ("We sold 1,000,000 units. Wow", ["We sold 1,000,000 units.", "Wow"]),
        ("Visit example.com today. Thanks", ["Visit example.com today.", "Thanks"]),
    ],
)
def test_decimals_thousands_and_urls_are_not_boundaries(text, units):
    assert sentences(text) == units


def test_thousands_separator_is_not_a_clause_boundary():
    assert clauses("We have 1,000 apples, and 2,500 pears.") == ["We have 1,000 apples,", "and 2,500 pears."]


@pytest.mark.parametrize(
    ("text", "units"),
    [
        ("Mr. Smith met Dr. Jones. They talked.", ["Mr. Smith met Dr. Jones.", "They talked."]),
        ("Mrs. Brown and Prof. Green arrived. Then", ["Mrs. Brown and Prof. Green arrived.", "Then"]),
        ("Fruit, e.g. apples, i.e. red ones. Next", ["Fruit, e.g. apples, i.e. red ones.", "Next"]),
        ("The U.S. economy grew. Then", ["The U.S. economy grew.", "Then"]),
        ("Ask a Ph.D. student. Ok", ["Ask a Ph.D. student.", "Ok"]),
        ("At 5 p.m. we left. Home", ["At 5 p.m. we left.", "Home"]),
        ("Cats vs. dogs. Fight", ["Cats vs. dogs.", "Fight"]),
        ("See Fig. 3 below. Done", ["See Fig. 3 below.", "Done"]),
        ("Smith et al. wrote it. Yes", ["Smith et al. wrote it.", "Yes"]),
        ("Apples, pears, etc. Then more.", ["Apples, pears, etc.", "Then more."]),  # etc. usually ends one
    ],
)
def test_abbreviations_are_not_boundaries(text, units):
    assert sentences(text) == units


@pytest.mark.parametrize(
    ("text", "units"),
    [
        ("J. R. R. Tolkien wrote it. Yes.", ["J. R. R. Tolkien wrote it.", "Yes."]),
        ("J.R.R. Tolkien wrote it. Yes.", ["J.R.R. Tolkien wrote it.", "Yes."]),
        ("George W. Bush spoke. Then", ["George W. Bush spoke.", "Then"]),
    ],
)
def test_initials_are_not_boundaries(text, units):
    assert sentences(text) == units


def test_leading_list_numbers_are_not_boundaries_but_sentence_final_numbers_are():
    assert sentences("1. Preheat the oven. 2. Mix it.") == ["1. Preheat the oven.", "2. Mix it."]
    assert sentences("I was born in 1999. Then") == ["I was born in 1999.", "Then"]
    assert sentences("There are 3. Count them") == ["There are 3.", "Count them"]


@pytest.mark.parametrize(
    ("text", "units"),
    [
        ('He said "Hello." Then left.', ['He said "Hello."', "Then left."]),
        # The rule is lexical: a mark + closer + whitespace ends a unit even mid-sentence.
        ("She asked 'why?' and left.", ["She asked 'why?'", "and left."]),
        ("She asked 'why?' He left.", ["She asked 'why?'", "He left."]),
        ("(See above.) Next one.", ["(See above.)", "Next one."]),
        ("[Really?!] Yes.", ["[Really?!]", "Yes."]),
        ("\u201cDone.\u201d Next", ["\u201cDone.\u201d", "Next"]),
        ("\u300c\u4f60\u597d\u3002\u300d\u4ed6\u8bf4", ["\u300c\u4f60\u597d\u3002\u300d", "\u4ed6\u8bf4"]),
        ('"Quoted." "Twice."', ['"Quoted."', '"Twice."']),
    ],
)
def test_closing_quotes_and_brackets_stay_with_their_unit(text, units):
    assert sentences(text) == units


@pytest.mark.parametrize(
    ("text", "units"),
    [
        ("Wait... what?! Really.", ["Wait...", "what?!", "Really."]),
        ("Hmm?!? Ok", ["Hmm?!?", "Ok"]),
        ("Wait\u2026 what", ["Wait\u2026", "what"]),
        ("\u4ec0\u4e48\uff1f\uff01\u2026\u597d", ["\u4ec0\u4e48\uff1f\uff01\u2026", "\u597d"]),
    ],
)
def test_a_punctuation_run_stays_together(text, units):
    assert sentences(text) == units


def test_cjk_marks_split_without_whitespace():
    assert sentences("\u4f60\u597d\u3002\u6211\u5f88\u597d\uff01\u4f60\u5462\uff1f") == [
        "\u4f60\u597d\u3002", "\u6211\u5f88\u597d\uff01", "\u4f60\u5462\uff1f",
    ]
    assert sentences("\u4ef7\u683c\u662f3.14\u5143\u3002\u597d") == ["\u4ef7\u683c\u662f3.14\u5143\u3002", "\u597d"]
    assert clauses("\u6211\u5728\u5fd9\uff0c\u7a0d\u540e\u8bf4\uff1b\u597d\u7684\u3002") == [
        "\u6211\u5728\u5fd9\uff0c", "\u7a0d\u540e\u8bf4\uff1b", "\u597d\u7684\u3002",
    ]
    # Japanese, with the CJK comma left alone in sentence mode.
    assert sentences("\u3053\u3093\u306b\u3061\u306f\uff0c\u5143\u6c17\u3002\u306f\u3044") == [
        "\u3053\u3093\u306b\u3061\u306f\uff0c\u5143\u6c17\u3002", "\u306f\u3044",
    ]


def test_indic_danda_splits():
    text = "\u0928\u092e\u0938\u094d\u0924\u0947\u0964 \u0906\u092a \u0915\u0948\u0938\u0947 \u0939\u0948\u0902\u0965\u0920\u0940\u0915"
    assert sentences(text) == [
        "\u0928\u092e\u0938\u094d\u0924\u0947\u0964",
        "\u0906\u092a \u0915\u0948\u0938\u0947 \u0939\u0948\u0902\u0965",
        "\u0920\u0940\u0915",
    ]


def test_arabic_question_mark_comma_and_semicolon():
    text = "\u0647\u0644 \u0623\u0646\u062a \u0628\u062e\u064a\u0631\u061f\u0646\u0639\u0645\u060c \u0634\u0643\u0631\u0627\u061b \u0648\u062f\u0627\u0639\u0627."
    assert sentences(text) == [
        "\u0647\u0644 \u0623\u0646\u062a \u0628\u062e\u064a\u0631\u061f",
        "\u0646\u0639\u0645\u060c \u0634\u0643\u0631\u0627\u061b \u0648\u062f\u0627\u0639\u0627.",
    ]
    assert clauses(text) == [
        "\u0647\u0644 \u0623\u0646\u062a \u0628\u062e\u064a\u0631\u061f",
        "\u0646\u0639\u0645\u060c",
        "\u0634\u0643\u0631\u0627\u061b",
        "\u0648\u062f\u0627\u0639\u0627.",
    ]


def test_clause_granularity_adds_commas_and_semicolons():
    assert clauses("First, second; third. Fourth") == ["First,", "second;", "third.", "Fourth"]
    assert sentences("First, second; third. Fourth") == ["First, second; third.", "Fourth"]
    assert clauses("e.g., this one") == ["e.g.,", "this one"]  # the comma ends a clause
    assert clauses("a,b;c") == ["a,b;c"]  # no whitespace after ASCII marks: no boundary


def test_units_without_words_join_the_next_unit_or_are_dropped():
    assert sentences("... and then. Ok") == ["... and then.", "Ok"]
    assert sentences("Hi! ! ! there") == ["Hi!", "! ! there"]
    assert sentences("Done. ...") == ["Done."]
    assert sentences("?!") == []
    assert split_text("...", "none") == []


# --- incremental feeding ---------------------------------------------------------------------------


def test_feed_emits_only_confirmed_units():
    sp = TextSplitter("sentence")
    assert sp.feed("Hello.") == []  # whitespace or the flush must follow an ASCII mark
    assert sp.feed(" World") == ["Hello."]
    assert sp.pending == " World"
    assert sp.feed(" is 3.") == []
    assert sp.feed("14 wide. And") == ["World is 3.14 wide."]
    assert sp.flush() == ["And"]
    assert sp.pending == ""


def test_cjk_boundary_waits_for_a_possible_closing_quote():
    sp = TextSplitter("sentence")
    assert sp.feed("\u300c\u597d\u3002") == []
    assert sp.feed("\u300d") == []
    assert sp.feed("\u518d\u89c1") == ["\u300c\u597d\u3002\u300d"]
    assert sp.flush() == ["\u518d\u89c1"]


def test_splitter_is_reusable_after_flush():
    sp = TextSplitter("sentence")
    assert sp.feed("One. Two") == ["One."]
    assert sp.flush() == ["Two"]
    assert sp.feed("Three. ") == ["Three."]
    assert sp.flush() == []


def test_feed_rejects_non_text():
    with pytest.raises(TypeError):
        TextSplitter("sentence").feed(b"bytes")  # type: ignore[arg-type]


CORPUS = (
    'Mr. J. R. R. Tolkien said "Hello." Then he paid $3.14, i.e. 1,000 cents... Really?! '
    "\u4f60\u597d\u3002\u300c\u6211\u5f88\u597d\uff01\u300d\u4f60\u5462\uff1f\u5728\u5fd9\uff0c\u7a0d\u540e\u8bf4\uff1b "
    "\u0928\u092e\u0938\u094d\u0924\u0947\u0964 \u0920\u0940\u0915\u0965 \u0647\u0644 \u0623\u0646\u062a\u061f "
    "\u0646\u0639\u0645\u060c \u0634\u0643\u0631\u0627\u061b (See Fig. 2.) The U.S. team won. 1. First. End"
)


@pytest.mark.parametrize("granularity", GRANULARITIES)
@pytest.mark.parametrize("seed", range(8))
def test_chunking_never_changes_the_result(granularity, seed):
    whole = split_text(CORPUS, granularity)
    rng = random.Random(seed)
    sp = TextSplitter(granularity)
    got: list[str] = []
    i = 0
    while i < len(CORPUS):
        n = rng.randint(1, 7)
        got += sp.feed(CORPUS[i : i + n])
        i += n
    got += sp.flush()
    assert got == whole
    # Nothing is lost or invented: the units are the text minus whitespace between them.
    assert "".join(whole).replace(" ", "") == CORPUS.replace(" ", "")


def test_corpus_units():
    assert split_text(CORPUS, "sentence") == [
        'Mr. J. R. R. Tolkien said "Hello."',
        "Then he paid $3.14, i.e. 1,000 cents...",
        "Really?!",
        "\u4f60\u597d\u3002",
        "\u300c\u6211\u5f88\u597d\uff01\u300d",
        "\u4f60\u5462\uff1f",
        "\u5728\u5fd9\uff0c\u7a0d\u540e\u8bf4\uff1b \u0928\u092e\u0938\u094d\u0924\u0947\u0964",
        "\u0920\u0940\u0915\u0965",
        "\u0647\u0644 \u0623\u0646\u062a\u061f",
        "\u0646\u0639\u0645\u060c \u0634\u0643\u0631\u0627\u061b (See Fig. 2.)",
        "The U.S. team won.",
        "1. First.",
        "End",
    ]


def test_token_by_token_feeding_is_linear():
    """A long text without boundaries fed a character at a time must not rescan the buffer."""
    import time

    sp = TextSplitter("clause")
    text = "word " * 20000
    t0 = time.perf_counter()
    for ch in text:
        sp.feed(ch)
    assert time.perf_counter() - t0 < 5.0
    assert sp.flush() == [text.strip()]
