"""Synthetic long-distance subject–verb agreement data (in the spirit of Linzen et al. 2016).

Number prediction: the input is a sentence prefix that stops right before the main verb; the
label is the number the verb must have (``sg`` / ``pl``), i.e. the number of the head noun of the
subject. Between the subject and the verb come 0..N modifiers, each adding one noun:

    prepositional phrase      "near the old tables"
    object relative clause    "that the author likes"     (its verb agrees with *its* noun)

An intervening noun whose number differs from the subject's is an *attractor*. Optional preposed
phrases ("behind the cabinets ,", "i think that") put nouns and words before the subject so that
neither "the first noun" nor "the last noun" is a shortcut; the last noun before the verb is an
attractor exactly when the nearest modifier noun has the other number, so a purely local rule
fails on attractors, which is the point of the task.

Example (label pl, 2 attractors, 3 intervening nouns):
    "she said that the keys to the cabinet that the author likes near the tables"

Every split is a TSV ``text<TAB>label<TAB>attractors<TAB>intervening`` (the classifier reads the
first two columns). Test and dev are balanced over 0..max attractors; training sentences draw the
number of modifiers uniformly and each noun's number at random. Output is a pure function of seed.

The default task saturates (every Transformer variant reaches 100 % by 1,000 updates), so three
knobs make it harder (``HARD`` sets all three, ``attnmt data agreement --hard``):

    filler               up to this many extra adjectives in each intervening noun phrase and an
                         adverb before each relative-clause verb: longer subject–verb distances
    max_modifiers        more intervening nouns, so more attractors (test buckets 0..max)
    train_max_modifiers  training sentences have at most this many modifiers, the test up to
                         max_modifiers: the longest distances and most attractors are unseen in
                         training (with fewer training sentences, n_train)

With the knobs at their defaults (filler 0, train_max_modifiers = max_modifiers) the output is
the same as before they existed.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass

from attnmt.corpora.outputs import write_new

NOUNS = [
    ("key", "keys"), ("author", "authors"), ("cabinet", "cabinets"), ("table", "tables"),
    ("boy", "boys"), ("girl", "girls"), ("teacher", "teachers"), ("doctor", "doctors"),
    ("book", "books"), ("letter", "letters"), ("king", "kings"), ("queen", "queens"),
    ("farmer", "farmers"), ("pilot", "pilots"), ("student", "students"), ("painting", "paintings"),
    ("house", "houses"), ("garden", "gardens"), ("dog", "dogs"), ("horse", "horses"),
    ("soldier", "soldiers"), ("singer", "singers"), ("lawyer", "lawyers"), ("window", "windows"),
    ("bottle", "bottles"), ("engine", "engines"), ("tree", "trees"), ("river", "rivers"),
    ("manager", "managers"), ("neighbour", "neighbours"), ("report", "reports"), ("song", "songs"),
]
ADJECTIVES = ["old", "new", "red", "small", "famous", "quiet", "young", "broken", "large", "strange"]
PREPOSITIONS = ["near", "behind", "of", "beside", "next to", "under", "with", "from", "above", "for"]
RC_VERBS = [("likes", "like"), ("sees", "see"), ("knows", "know"), ("hates", "hate"),
            ("admires", "admire"), ("watches", "watch"), ("mentions", "mention")]
PREAMBLES = ["i think that", "she said that", "we know that", "yesterday ,", "in the end ,",
             "they believe that", "of course ,"]
ADVERBS = ["probably", "really", "certainly", "often", "usually"]
# the --hard task: 0-8 intervening nouns (up to 8 attractors), up to 3 filler words per phrase,
# training on 3,000 sentences with at most 5 modifiers
HARD = {"max_modifiers": 8, "filler": 3, "train_max_modifiers": 5, "n_train": 3000}


@dataclass
class Example:
    text: str
    label: str  # sg | pl
    attractors: int
    intervening: int  # nouns between the subject and the verb

    def tsv(self) -> str:
        return f"{self.text}\t{self.label}\t{self.attractors}\t{self.intervening}"


def _np(rng: random.Random, plural: bool, adj_p: float = 0.3, filler: int = 0) -> list[str]:
    noun = rng.choice(NOUNS)[1 if plural else 0]
    extra = [rng.choice(ADJECTIVES) for _ in range(rng.randint(0, filler))] if filler else []
    return ["the"] + ([rng.choice(ADJECTIVES)] if rng.random() < adj_p else []) + extra + [noun]


def _modifier(rng: random.Random, plural: bool, filler: int = 0) -> list[str]:
    if rng.random() < 0.6:
        return rng.choice(PREPOSITIONS).split() + _np(rng, plural, filler=filler)
    verb = rng.choice(RC_VERBS)[1 if plural else 0]
    adverb = [rng.choice(ADVERBS)] if filler else []
    return ["that"] + _np(rng, plural, filler=filler) + adverb + [verb]


def make_example(rng: random.Random, modifiers: int, attractors: int | None = None, filler: int = 0) -> Example:
    """One prefix with ``modifiers`` intervening nouns; ``attractors`` fixes how many of them
    differ in number from the subject (random if None); ``filler``: see the module docstring."""
    subject_pl = rng.random() < 0.5
    if attractors is None:
        flips = [rng.random() < 0.5 for _ in range(modifiers)]
    else:
        flips = [True] * attractors + [False] * (modifiers - attractors)
        rng.shuffle(flips)
    words: list[str] = []
    if rng.random() < 0.5:
        words += rng.choice(PREAMBLES).split()
    if rng.random() < 0.3:  # a preposed phrase with a noun before the subject
        words += rng.choice(PREPOSITIONS).split() + _np(rng, rng.random() < 0.5) + [","]
    words += _np(rng, subject_pl)
    for flip in flips:
        words += _modifier(rng, subject_pl != flip, filler)
    if rng.random() < 0.2:
        words.append(rng.choice(ADVERBS))
    return Example(" ".join(words), "pl" if subject_pl else "sg", sum(flips), modifiers)


def generate(n_train: int, n_test_per_bucket: int, max_modifiers: int = 4, seed: int = 1,
             filler: int = 0, train_max_modifiers: int | None = None) -> dict[str, list[Example]]:
    """train (random attractors, 0..train_max_modifiers modifiers uniformly; default max), dev
    and test (balanced over the number of attractors 0..max, each bucket with between
    `attractors` and max modifiers); no test/dev sentence text occurs in train."""
    train_max = max_modifiers if train_max_modifiers is None else train_max_modifiers
    rng = random.Random(seed)
    splits: dict[str, list[Example]] = {}
    held: set[str] = set()
    for name in ("test", "dev"):
        out = []
        for k in range(max_modifiers + 1):
            bucket: list[Example] = []
            while len(bucket) < n_test_per_bucket:
                ex = make_example(rng, rng.randint(max(k, 1) if k else 0, max_modifiers), k, filler)
                if ex.text not in held:
                    held.add(ex.text)
                    bucket.append(ex)
            out += bucket
        rng.shuffle(out)
        splits[name] = out
    train: list[Example] = []
    while len(train) < n_train:
        ex = make_example(rng, rng.randint(0, train_max), None, filler)
        if ex.text not in held:
            train.append(ex)
    splits["train"] = train
    return splits


def write_agreement(out_dir: str | os.PathLike, n_train: int = 20000, n_test_per_bucket: int = 500,
                    max_modifiers: int = 4, seed: int = 1, filler: int = 0,
                    train_max_modifiers: int | None = None, force: bool = False) -> dict[str, int]:
    """Write DIR/{train,dev,test}.tsv; returns the number of lines of each. Files of the same
    names with other content stay unless ``force`` (outputs.write_new)."""
    splits = generate(n_train, n_test_per_bucket, max_modifiers, seed, filler, train_max_modifiers)
    write_new(out_dir, {f"{name}.tsv": "".join(ex.tsv() + "\n" for ex in examples)
                        for name, examples in splits.items()}, force)
    return {name: len(examples) for name, examples in splits.items()}
