"""The synthetic gold-alignment benchmark: links agree with the sentences and the dictionary."""

from __future__ import annotations

import random

from attnmt.cli.main import main
from attnmt.corpora.synthetic import (
    COMPLEMENTIZER,
    CONJUNCTION,
    DETERMINERS,
    FUTURE,
    PAST_AUX,
    PERSONAL_A,
    PREPOSITIONS,
    Generator,
    generate,
    make_lexicon,
)
from attnmt.eval.alignment import parse_links


def _allowed(lex) -> dict[str, set[str]]:
    """Source word -> the target words a sure link from it may reach."""
    ok: dict[str, set[str]] = {}
    for s, t in lex.nouns.items():
        ok[s] = set(t)
    for s, t in lex.adjectives.items():
        ok[s] = {t}
    for s, t in list(lex.verbs.items()) + list(lex.say_verbs.items()):
        ok[s] = {t, t + "ra"}
        ok[s + "ed"] = {PAST_AUX, t}
    ok.update({s: {t} for s, t in DETERMINERS.items()})
    ok.update({s: {t} for s, t in PREPOSITIONS.items()})
    ok.update({n: {n} for n in lex.names})
    ok[COMPLEMENTIZER[0]] = {COMPLEMENTIZER[1]}
    ok[CONJUNCTION[0]] = {CONJUNCTION[1]}
    return ok


def test_gold_links_are_consistent_with_sentences_and_dictionary():
    lex = make_lexicon(3, nouns=16, adjectives=8, verbs=8, names=50)
    allowed = _allowed(lex)
    pairs = generate(400, lex, seed=7)
    crossing = one_to_many = possible_only = 0
    for p in pairs:
        sure, possible = parse_links(p.align_line())
        assert sure <= possible
        assert all(0 <= i < len(p.src) and 0 <= j < len(p.tgt) for i, j in possible)
        for i, j in sure:
            assert p.tgt[j] in allowed[p.src[i]], (p.src[i], p.tgt[j])
        # every word takes part in a link; every target word except the inserted "a" has a sure one
        assert {i for i, _ in possible} == set(range(len(p.src)))
        assert {j for _, j in possible} == set(range(len(p.tgt)))
        for j, w in enumerate(p.tgt):
            if not any(jj == j for _, jj in sure):
                assert w == PERSONAL_A
        for i, j in possible - sure:
            assert p.src[i] == FUTURE or p.tgt[j] == PERSONAL_A
            possible_only += 1
        links = sorted(sure)
        crossing += any(i1 < i2 and j1 > j2 for i1, j1 in links for i2, j2 in links)
        one_to_many += any(sum(1 for ii, _ in sure if ii == i) > 1 for i in range(len(p.src)))
    # the reorderings the benchmark exists for all occur
    assert crossing > 100 and one_to_many > 50 and possible_only > 20


def test_subordinate_clauses_are_verb_final():
    lex = make_lexicon(2, nouns=16, adjectives=8, verbs=8, names=50)
    gen = Generator(lex, random.Random(4))
    verb_forms = set(lex.verbs) | {v + "ed" for v in lex.verbs} | {FUTURE}
    for _ in range(200):
        p = gen.clause(subordinate=True)
        sure = parse_links(p.align_line())[0]
        v = next(i for i, w in enumerate(p.src) if w in verb_forms)  # the verb follows the subject
        end = next((i for i in range(v + 1, len(p.src)) if p.src[i] in PREPOSITIONS), len(p.src))
        verb_j = {j for i, j in sure if v <= i <= v + (p.src[v] == FUTURE)}
        object_j = {j for i, j in sure if v + 1 + (p.src[v] == FUTURE) <= i < end}
        assert object_j and min(verb_j) > max(object_j)  # source V O -> target O V


def test_deterministic_and_cli(tmp_path):
    a = [(p.src, p.tgt, p.links) for p in generate(30, make_lexicon(1), 5)]
    b = [(p.src, p.tgt, p.links) for p in generate(30, make_lexicon(1), 5)]
    assert a == b
    out = tmp_path / "syn"
    assert main(["data", "synthetic", "--out", str(out), "--train", "50", "--dev", "5", "--test", "7",
                 "--names", "20"]) == 0
    for split, n in (("train", 50), ("dev", 5), ("test", 7)):
        src = (out / f"{split}.src").read_text(encoding="utf-8").splitlines()
        tgt = (out / f"{split}.tgt").read_text(encoding="utf-8").splitlines()
        gold = (out / f"{split}.align").read_text(encoding="utf-8").splitlines()
        assert len(src) == len(tgt) == len(gold) == n
        for s, t, g in zip(src, tgt, gold):
            _, possible = parse_links(g)
            assert max(i for i, _ in possible) < len(s.split()) and max(j for _, j in possible) < len(t.split())
    lexicon = (out / "lexicon.tsv").read_text(encoding="utf-8").splitlines()
    assert lexicon and all(len(x.split("\t")) == 2 for x in lexicon)
    assert main(["data", "synthetic", "--out", str(out), "--names", "0"]) == 2
