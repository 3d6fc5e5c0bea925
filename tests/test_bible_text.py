"""The Bible corpus's text handling on hand-made fixtures: SWORD markup and keys (corpora/sword.py),
verse alignment across versifications (corpora/versification.py) and the Spanish module's quirks
(corpora/bible.py). The whole build is in tests/test_corpus_builders.py."""

from __future__ import annotations

import random

import pytest

from attnmt.corpora import bible
from attnmt.corpora.sword import (
    entry_paragraphs,
    imp_verses,
    osis_key,
    parse_imp,
    parse_key,
    parse_verse,
    range_key,
    sort_keys,
)
from attnmt.corpora.versification import AlignConfig, Verse, align_bibles, keep_segment
from attnmt.errors import UserError

# ---------------------------------------------------------------- markup


def test_strip_osis_markup_notes_and_strongs():
    raw = (
        '<w lemma="strong:H0430">In</w> <w lemma="strong:H7225">beginning</w>, '
        '<w lemma="strong:H0430">God</w><note placement="foot"><reference type="annotateRef">1:1 '
        '</reference>The Hebrew word is “<w lemma="strong:H9999">Elohim</w>”.</note>'
        '<w lemma="strong:H1254">created</w> the \\nd <w lemma="strong:H3068">LORD</w> '
        '&amp; <transChange type="added">was</transChange> good.¶ <div eID="x" type="x-p"/>'
    )
    text, nums = parse_verse(raw)
    assert text == "In beginning, God created the LORD & was good."
    # leading zeros dropped; the number inside the footnote does not count
    assert nums == frozenset({"H430", "H7225", "H1254", "H3068"})


def test_titles_speakers_and_book_end():
    raw = (
        '<title canonical="true" type="psalm">A Psalm of David.</title><lg sID="a"/>'
        '<l sID="b"/>Yahweh, hear me!<l eID="b"/><title type="x-s">Section heading</title>'
        '<speaker>Beloved</speaker> Amen. <div canonical="true" eID="g1" osisID="Rev" '
        'type="book"/><div type="glossary">Glossary text</div>'
    )
    assert parse_verse(raw)[0] == "A Psalm of David. Yahweh, hear me! Amen."


def test_adjacent_word_elements_and_thml_sync():
    raw = '<w lemma="strong:G1">hay allí</w><transChange type="added">también</transChange><w>b</w>'
    assert parse_verse(raw)[0] == "hay allí también b"
    assert parse_verse(raw, junction="|")[0] == "hay allí|también|b"
    thml = 'In the beginning<sync type="Strongs" value="H07225"/> God<sync type="Strongs" value="H430"/>'
    assert parse_verse(thml) == ("In the beginning God", frozenset({"H7225", "H430"}))


def test_entry_paragraphs_split_on_blocks():
    raw = (
        '<div sID="a" type="x-p"/> First paragraph has <hi type="bold">five</hi> words. '
        '<div eID="a" type="x-p"/><div sID="b" type="x-p"/>Second one<note>n</note>, here.'
        '<div eID="b" type="x-p"/>'
    )
    assert entry_paragraphs(raw) == ["First paragraph has five words.", "Second one, here."]


# ---------------------------------------------------------------- keys


def test_keys_parse_order_and_ranges():
    assert parse_key("Job.39.27") == (17, 39, 27)
    assert sort_keys(["Matt.1.1", "Gen.10.1", "Gen.2.3", "Gen.2.10"]) == [
        "Gen.2.3", "Gen.2.10", "Gen.10.1", "Matt.1.1"
    ]
    assert range_key(["Job.39.27", "Job.39.28", "Job.40.5"]) == "Job.39.27-Job.40.5"
    assert range_key(["Ruth.1.1"]) == "Ruth.1.1"
    assert osis_key("I Samuel 3:4") == "1Sam.3.4"
    assert osis_key("Revelation of John 22:21") == "Rev.22.21"
    for intro in ("Genesis 0:0", "Genesis 1:0", "[ Module Heading ]", "Tobit 1:1"):
        assert osis_key(intro) is None
    with pytest.raises(UserError):
        parse_key("Genesis 1:1")


def test_parse_imp_streams_entries():
    imp = "$$$[ Module Heading ]\n$$$Genesis 1:0\n<chapter/>\n$$$Genesis 1:1\nIn the\nbeginning\n"
    assert list(parse_imp(imp))[-1] == ("Genesis 1:1", "In the\nbeginning")
    assert imp_verses(imp) == {"Gen.1.1": "In the\nbeginning"}


# ---------------------------------------------------------------- versification


def _strongs(rng: random.Random) -> frozenset[str]:
    return frozenset(f"H{rng.randrange(1, 9000)}" for _ in range(8))


def _shifted_book():
    """English Num 12:1-8, 13:1-10, 14:1-6. The Spanish stores Hebrew numbering in the same
    keys for chapters 12-13: its 12:8 slot is empty, English 12:8 is its 13:1 (so 13:k holds
    English 13:k-1), and its 13:10 holds English 13:9 + 13:10. Chapter 14 is in step."""
    rng = random.Random(3)
    keys = [f"Num.12.{v}" for v in range(1, 9)] + [f"Num.13.{v}" for v in range(1, 11)]
    keys += [f"Num.14.{v}" for v in range(1, 7)]
    eng = {k: Verse(k, f"en {k}", _strongs(rng)) for k in keys}
    content = {k: (f"es {k}", eng[k].strongs) for k in keys}  # Spanish translation of English k
    spa = {k: Verse(k, *content[k]) for k in keys}
    spa["Num.12.8"] = Verse("Num.12.8", "", frozenset())
    spa["Num.13.1"] = Verse("Num.13.1", *content["Num.12.8"])
    for v in range(2, 10):
        spa[f"Num.13.{v}"] = Verse(f"Num.13.{v}", *content[f"Num.13.{v - 1}"])
    spa["Num.13.10"] = Verse(
        "Num.13.10", "es Num.13.9 es Num.13.10",
        content["Num.13.9"][1] | content["Num.13.10"][1],
    )
    return keys, eng, spa


def test_realigns_shifted_chapter_with_overflow_verse():
    keys, eng, spa = _shifted_book()
    segs = align_bibles(keys, eng, spa, AlignConfig(pad=2))
    got = {seg.src: seg.tgt for seg in segs if keep_segment(seg)}
    assert got[("Num.12.8",)] == ("Num.13.1",)
    assert got[("Num.13.1",)] == ("Num.13.2",)
    assert got[("Num.13.8",)] == ("Num.13.9",)
    assert got[("Num.13.9", "Num.13.10")] == ("Num.13.10",)
    for k in ("Num.12.1", "Num.12.7", "Num.14.1", "Num.14.6"):
        assert got[(k,)] == (k,)
    # every English verse is used exactly once, in order
    assert [k for seg in segs for k in seg.src] == keys


def test_make_pairs_range_keys_and_english_replacement():
    keys, eng, spa = _shifted_book()
    web = {k: Verse(k, f"web {k}", frozenset()) for k in keys}
    web["Num.14.2"] = Verse("Num.14.2", "", frozenset())  # a verse the English module omits
    web["Num.14.3"] = Verse("Num.14.3", "far " * 20 + "too long", frozenset())
    pairs, log = bible.make_pairs(eng, spa, web)
    by_key = {p.key: p for p in pairs}
    assert by_key["Num.13.9-Num.13.10"].en == "web Num.13.9 web Num.13.10"
    assert by_key["Num.13.9-Num.13.10"].es == "es Num.13.9 es Num.13.10"
    assert by_key["Num.12.8"].es == "es Num.12.8"
    assert "Num.14.2" not in by_key and "Num.14.3" not in by_key
    reasons = {r.reason for r in log}
    assert "realigned" in reasons and "english-missing" in reasons
    assert any(r.startswith("english-length") for r in reasons)


def test_book_split():
    assert bible.split_of("Josh.1.1") == "dev"
    assert bible.split_of("Rom.16.27") == "dev"
    assert bible.split_of("Heb.1.1") == "test"
    assert bible.split_of("Jas.5.20") == "test"
    assert bible.split_of("Job.39.27-Job.40.5") == "train"
    pairs = [bible.Pair(k, "e", "s") for k in ("Gen.1.1", "Judg.1.1", "Eccl.1.1", "Rev.1.1")]
    assert [[p.key for p in ps] for ps in bible.split_pairs(pairs).values()] == [
        ["Gen.1.1", "Rev.1.1"], ["Eccl.1.1"], ["Judg.1.1"]
    ]


# ---------------------------------------------------------------- Spanish module quirks


def test_recase_chapter_openings():
    texts = {
        "Gen.1.1": "EN el principio crió Dios.",
        "Gen.1.2": "Y el Dios de Abraham; y Jehová dijo. Y Jehová. en.",
        "Gen.4.1": "Y CONOCIÓ Adam á su mujer.",
        "Ps.3.1": "Salmo de David. ¡OH Jehová, cuánto!",
        "Ps.119.1": "ALEPH. BIENAVENTURADOS los perfectos.",
        "Exod.7.1": "Y JEHOVÁ dijo.",
        "Exod.6.2": "Yo soy JEHOVÁ.",  # not a chapter's first verse: untouched
    }
    out = bible.recase_openings(texts)
    assert out["Gen.1.1"] == "En el principio crió Dios."
    assert out["Gen.4.1"] == "Y conoció Adam á su mujer."
    assert out["Ps.3.1"] == "Salmo de David. ¡Oh Jehová, cuánto!"
    assert out["Ps.119.1"] == "Aleph. Bienaventurados los perfectos."
    assert out["Exod.7.1"] == "Y Jehová dijo."
    assert out["Exod.6.2"] == "Yo soy JEHOVÁ."


def test_enclitic_junctions_and_colophons():
    j = bible.JUNCTION
    texts = {
        "Mark.6.29": f"Y oyéndo{j}lo sus discípulos",
        "Gal.1.4": "para que sea libre",
        "Gal.1.5": f"Al cual{j}sea{j}la gloria",
        "John.4.15": f"á sacar{j}la. Y sacarla otra vez; sacar agua",
        "Rom.16.27": "Al solo Dios sabio. Amén. Fué escrita de Corinto á los Romanos.",
        "Rom.16.26": "Amén. Fué escrita en medio del libro.",  # not the book's last verse
    }
    out = bible.strip_colophons(bible.resolve_junctions(texts))
    assert out["Mark.6.29"] == "Y oyéndolo sus discípulos"  # "oyéndo" never stands alone
    assert out["Gal.1.5"] == "Al cual sea la gloria"  # "sea" stands alone in Gal 1:4
    assert out["John.4.15"].startswith("á sacarla.")  # "sacarla" attested elsewhere
    assert out["Rom.16.27"] == "Al solo Dios sabio. Amén."
    assert out["Rom.16.26"] == texts["Rom.16.26"]
