"""A synthetic parallel corpus with known word alignments, for measuring attention as alignment.

Luong et al. (2015, section 5.4 / Table 6) score attention against hand-made gold alignments (AER).
Such data is rare, so this module generates its own: a small English-like source grammar, a
dictionary, and a target language ("Spanish/German-like") that differs from the source by the
reorderings attention has to learn:

* adjective-noun swap:        the old dog      -> el0 dogT oldT          (DET N A)
* verb-final subordinates:    said that X saw Y -> saidT que X' Y' sawT  (long-distance move)
* one-to-many words:          walked            -> ha walkT              (past tense: two words)
                              compound nouns    -> houseT de doorT       (one noun, three words)
* many-to-one words:          will see          -> seeT-ra               (future: one word)
* insertions:                 saw Anna          -> sawT a Anna           (Spanish personal "a")
* names copied unchanged, drawn from a long Zipf tail, so a word-level vocabulary leaves many of
  them <unk> -- the case <unk> replacement is for.

Gold alignments are written like the RWTH/Och-Ney sets the paper used, one line per pair, with
0-based whitespace-word indices ``i-j`` (source i, target j) for sure links and ``i?j`` for possible
links (S ⊆ P). Sure links join each content word to its translation (every piece of a one-to-many
translation); possible-only links are the ones annotators disagree on: the future auxiliary
"will" to the fused verb, and the inserted "a" to the name it marks. A model that aligns every
target word to its sure source word therefore has AER 0.

Output: DIR/{train,dev,test}.{src,tgt}, DIR/{train,dev,test}.align, DIR/lexicon.tsv (the
dictionary, ``src<TAB>tgt``, usable with ``translate --replace-unk --dict``).
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field

from attnmt.corpora.outputs import text_of, write_new
from attnmt.errors import UserError

SPLITS = ("train", "dev", "test")

# function words: fixed, one-to-one
DETERMINERS = {"the": "el", "a": "un", "this": "este", "every": "cada", "my": "mi"}
PREPOSITIONS = {"in": "en", "with": "con", "near": "cerca", "under": "bajo", "for": "para",
                "from": "desde"}
COMPLEMENTIZER = ("that", "que")
CONJUNCTION = ("and", "y")
FUTURE = "will"  # "will V" -> one fused target word V-ra
PAST_AUX = "ha"  # "V-ed" -> "ha V"
PERSONAL_A = "a"  # inserted before a name object
COMPOUND_LINK = "de"  # compound noun -> "head de modifier"


@dataclass
class Pair:
    """A sentence pair under construction: words and gold links (source i, target j, sure?)."""

    src: list[str] = field(default_factory=list)
    tgt: list[str] = field(default_factory=list)
    links: list[tuple[int, int, bool]] = field(default_factory=list)

    def extend(self, other: Pair) -> None:
        si, tj = len(self.src), len(self.tgt)
        self.src.extend(other.src)
        self.tgt.extend(other.tgt)
        self.links.extend((i + si, j + tj, sure) for i, j, sure in other.links)

    def align_line(self) -> str:
        return " ".join(f"{i}{'-' if sure else '?'}{j}" for i, j, sure in sorted(set(self.links)))


def _word_maker(rng: random.Random, onsets: str, vowels: str, codas: str):
    """A generator of distinct pronounceable pseudo-words from the given letters."""
    seen: set[str] = set()

    def make(syllables: int) -> str:
        while True:
            w = "".join(rng.choice(onsets) + rng.choice(vowels) for _ in range(syllables))
            if rng.random() < 0.4:
                w += rng.choice(codas)
            if w not in seen:
                seen.add(w)
                return w

    return make


@dataclass
class Lexicon:
    nouns: dict[str, list[str]]  # source noun -> target words (1 or 3 for compounds)
    adjectives: dict[str, str]
    verbs: dict[str, str]  # transitive verbs, source stem -> target stem
    say_verbs: dict[str, str]  # verbs taking a that-clause
    names: list[str]  # copied unchanged; drawn Zipf-distributed

    def dictionary(self) -> list[tuple[str, str]]:
        """One-word entries for the <unk>-replacement dictionary (compounds: their head word)."""
        out = [(s, t[0]) for s, t in self.nouns.items()]
        out += list(self.adjectives.items()) + list(self.verbs.items()) + list(self.say_verbs.items())
        out += [(s + "ed", t) for s, t in list(self.verbs.items()) + list(self.say_verbs.items())]
        out += list(DETERMINERS.items()) + list(PREPOSITIONS.items())
        return out


def make_lexicon(seed: int, nouns: int = 80, adjectives: int = 40, verbs: int = 40,
                 names: int = 600) -> Lexicon:
    rng = random.Random(seed)
    src_word = _word_maker(rng, "bdfgklmnprstvz", "aeiou", "nrs")
    tgt_word = _word_maker(rng, "bcdfghjlmnñpqrstvxy", "aeiouáéó", "lnsz")
    name_word = _word_maker(rng, "bdghjklmnrstvz", "aeiouy", "nrl")
    reserved = set(DETERMINERS) | set(DETERMINERS.values()) | set(PREPOSITIONS) | set(PREPOSITIONS.values())
    reserved |= {*COMPLEMENTIZER, *CONJUNCTION, FUTURE, PAST_AUX, PERSONAL_A, COMPOUND_LINK}

    def fresh(maker, syllables):
        while True:
            w = maker(syllables)
            if w not in reserved and not w.endswith("ed"):
                reserved.add(w)
                return w

    noun_map = {}
    for k in range(nouns):
        s = fresh(src_word, 2)
        # every 8th noun is a compound in the target: "head de modifier"
        noun_map[s] = [fresh(tgt_word, 2), COMPOUND_LINK, fresh(tgt_word, 2)] if k % 8 == 7 else [fresh(tgt_word, 2)]
    adj_map = {fresh(src_word, 2): fresh(tgt_word, 3) for _ in range(adjectives)}
    verb_map = {fresh(src_word, 2): fresh(tgt_word, 2) for _ in range(verbs)}
    say_map = {fresh(src_word, 3): fresh(tgt_word, 2) for _ in range(max(2, verbs // 8))}
    name_list = [fresh(name_word, rng.choice((2, 3))).capitalize() for _ in range(names)]
    return Lexicon(noun_map, adj_map, verb_map, say_map, name_list)


class Generator:
    """Draws sentence pairs from the grammar

        sentence := clause (CONJ clause)?
        clause   := NP V NP PP? | NP SAY "that" NP V NP        (subordinate clause verb-final)
        NP       := DET ADJ{0,2} N | NAME                       (target: DET N ADJ..., name as is)
        PP       := P NP
        V        := stem | stem+"ed" (target "ha" stem') | "will" stem (target stem'+"ra")
    """

    def __init__(self, lexicon: Lexicon, rng: random.Random):
        self.lex, self.rng = lexicon, rng
        weights = [1.0 / (r + 1) for r in range(len(lexicon.names))]  # Zipf: a long rare tail
        self._name_weights = weights

    def noun_phrase(self, allow_name: bool = True) -> tuple[Pair, bool]:
        rng, lex = self.rng, self.lex
        if allow_name and rng.random() < 0.25:
            name = rng.choices(lex.names, self._name_weights)[0]
            return Pair([name], [name], [(0, 0, True)]), True
        det = rng.choice(list(DETERMINERS))
        n_adj = rng.choices((0, 1, 2), (0.5, 0.35, 0.15))[0]
        adjs = rng.sample(list(lex.adjectives), n_adj)
        noun = rng.choice(list(lex.nouns))
        p = Pair([det, *adjs, noun], [DETERMINERS[det]], [(0, 0, True)])
        noun_i = len(adjs) + 1
        for piece in lex.nouns[noun]:  # one-to-many for compounds
            p.links.append((noun_i, len(p.tgt), True))
            p.tgt.append(piece)
        for a, adj in enumerate(adjs):  # adjectives after the noun, in source order
            p.links.append((a + 1, len(p.tgt), True))
            p.tgt.append(lex.adjectives[adj])
        return p, False

    def verb(self, stem_map: dict[str, str]) -> Pair:
        rng = self.rng
        stem = rng.choice(list(stem_map))
        tense = rng.choices(("present", "past", "future"), (0.4, 0.4, 0.2))[0]
        t = stem_map[stem]
        if tense == "present":
            return Pair([stem], [t], [(0, 0, True)])
        if tense == "past":  # one-to-many: both target words come from the one source verb
            return Pair([stem + "ed"], [PAST_AUX, t], [(0, 0, True), (0, 1, True)])
        # many-to-one: the fused word translates the verb; "will" is only a possible link
        return Pair([FUTURE, stem], [t + "ra"], [(1, 0, True), (0, 0, False)])

    def _object(self) -> Pair:
        obj, is_name = self.noun_phrase()
        if not is_name:
            return obj
        p = Pair([], [PERSONAL_A], [])  # inserted word: possible link to the name it marks
        p.extend(obj)
        p.links.append((0, 0, False))
        return p

    def clause(self, subordinate: bool = False) -> Pair:
        rng = self.rng
        p = Pair()
        subj, _ = self.noun_phrase()
        p.extend(subj)
        if not subordinate and rng.random() < 0.3:
            p.extend(self.verb(self.lex.say_verbs))
            p.extend(Pair([COMPLEMENTIZER[0]], [COMPLEMENTIZER[1]], [(0, 0, True)]))
            p.extend(self.clause(subordinate=True))
            return p
        verb, obj = self.verb(self.lex.verbs), self._object()
        if subordinate:  # verb-final: the object comes before the verb in the target
            si = len(p.src)
            p.src.extend(verb.src + obj.src)
            tj = len(p.tgt)
            p.tgt.extend(obj.tgt + verb.tgt)
            p.links.extend((i + si + len(verb.src), j + tj, s) for i, j, s in obj.links)
            p.links.extend((i + si, j + tj + len(obj.tgt), s) for i, j, s in verb.links)
        else:
            p.extend(verb)
            p.extend(obj)
        if rng.random() < 0.3:
            prep = rng.choice(list(PREPOSITIONS))
            pp = Pair([prep], [PREPOSITIONS[prep]], [(0, 0, True)])
            pp.extend(self.noun_phrase()[0])
            p.extend(pp)
        return p

    def sentence(self) -> Pair:
        p = self.clause()
        if self.rng.random() < 0.2:
            p.extend(Pair([CONJUNCTION[0]], [CONJUNCTION[1]], [(0, 0, True)]))
            p.extend(self.clause())
        return p


def generate(n: int, lexicon: Lexicon, seed: int) -> list[Pair]:
    gen = Generator(lexicon, random.Random(seed))
    return [gen.sentence() for _ in range(n)]


def write_synthetic(
    out_dir: str | os.PathLike,
    sizes: dict[str, int] | None = None,
    seed: int = 1,
    nouns: int = 80,
    adjectives: int = 40,
    verbs: int = 40,
    names: int = 600,
    force: bool = False,
) -> dict[str, int]:
    """Write the corpus, gold alignments and dictionary; returns the number of pairs per split.
    Files of the same names with other content stay unless ``force`` (outputs.write_new)."""
    sizes = sizes or {"train": 20000, "dev": 500, "test": 500}
    for split, n in sizes.items():
        if n < 0:
            raise UserError(f"--{split} must be >= 0, got {n}")
    if min(nouns, adjectives, verbs, names) < 1:
        raise UserError("--nouns, --adjectives, --verbs and --names must be at least 1")
    lex = make_lexicon(seed, nouns, adjectives, verbs, names)
    files: dict[str, str] = {}
    for k, split in enumerate(SPLITS):
        pairs = generate(sizes.get(split, 0), lex, seed * 1000 + k)
        files[f"{split}.src"] = text_of(" ".join(p.src) for p in pairs)
        files[f"{split}.tgt"] = text_of(" ".join(p.tgt) for p in pairs)
        files[f"{split}.align"] = text_of(p.align_line() for p in pairs)
    files["lexicon.tsv"] = text_of(f"{s}\t{t}" for s, t in lex.dictionary())
    write_new(out_dir, files, force)
    return {split: sizes.get(split, 0) for split in SPLITS}
