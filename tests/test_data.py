"""Data pipeline: reading and validation, tokenizers, batching."""

import pytest
import torch

from attnmt.data.batching import collate, filter_by_length, make_batches
from attnmt.data.corpus import read_lines, read_parallel
from attnmt.data.vocab import (
    BOS,
    EOS,
    PAD,
    UNK,
    SentencePieceTokenizer,
    WordTokenizer,
    load_tokenizer,
    map_pieces_to_words,
)
from attnmt.errors import UserError


def _write(path, text: str | bytes):
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def test_line_count_mismatch_names_both_files(tmp_path):
    _write(tmp_path / "c.en", "a\nb\nc\n")
    _write(tmp_path / "c.es", "x\ny\n")
    with pytest.raises(UserError) as err:
        read_parallel(str(tmp_path / "c"), "en", "es")
    msg = str(err.value)
    assert "c.en has 3 lines" in msg and "c.es has 2" in msg


def test_invalid_utf8_names_file_and_line(tmp_path):
    path = _write(tmp_path / "bad.txt", b"fine\nalso fine\nbroken \xff\xfe here\n")
    with pytest.raises(UserError, match=r"bad.txt:3: invalid UTF-8"):
        read_lines(path)


def test_huge_line_is_refused_with_its_line_number(tmp_path):
    path = _write(tmp_path / "huge.txt", "ok\n" + "x" * 1_100_000 + "\n")
    with pytest.raises(UserError, match=r"huge.txt:2: line is"):
        read_lines(path)


def test_empty_pairs_are_skipped_and_counted(tmp_path):
    _write(tmp_path / "c.en", "a b\n\nc\nd\n")
    _write(tmp_path / "c.es", "x\ny\n   \nz\n")
    src, tgt, stats = read_parallel(str(tmp_path / "c"), "en", "es")
    assert src == ["a b", "d"] and tgt == ["x", "z"]
    assert stats.lines == 4 and stats.empty_skipped == 2


def test_tsv_corpus_uses_the_last_two_columns(tmp_path):
    path = _write(tmp_path / "c.tsv", "Gen.1.1\tIn the beginning\tEn el principio\n")
    src, tgt, _ = read_parallel(str(path), "en", "es")
    assert src == ["In the beginning"] and tgt == ["En el principio"]


def test_word_tokenizer_top_k_unk_and_word_indices(tmp_path):
    tok = WordTokenizer.build(["the cat, the dog.", "the cat"], max_size=6)
    assert len(tok) == 6 and tok.tokens[:4] == ["<pad>", "<unk>", "<s>", "</s>"]
    assert tok.encode("the cat") == [4, 5]
    assert UNK in tok.encode("the zebra")
    pieces, words = tok.split_with_words("the cat, sat.")
    assert pieces == ["the", "cat", ",", "sat", "."] and words == [0, 1, 1, 2, 2]
    full = WordTokenizer.build(["the cat, the dog."], max_size=100)
    assert full.decode(full.encode("the cat, the dog.")) == "the cat, the dog."
    tok.save(tmp_path, "src")
    again = load_tokenizer(tmp_path, "src")
    assert again.tokens == tok.tokens


def test_sentencepiece_tokenizer_specials_and_words(tmp_path):
    lines = [f"word{i % 7} and more text here number {i}" for i in range(200)]
    tok = SentencePieceTokenizer.build(lines, tmp_path / "m", vocab_size=60, model_type="bpe")
    assert [tok.piece(i) for i in (PAD, UNK, BOS, EOS)] == ["<pad>", "<unk>", "<s>", "</s>"]
    pieces, words = tok.split_with_words("word3 and text")
    assert words[0] == 0 and words[-1] == 2 and sorted(words) == words
    assert tok.decode(tok.encode("word3 and text")) == "word3 and text"
    tok.save(tmp_path, "tgt")
    assert load_tokenizer(tmp_path, "tgt").encode("word3") == tok.encode("word3")


def test_map_pieces_to_words_follows_detokenised_spacing():
    assert map_pieces_to_words(["Hola", ",", "mundo", "."], "Hola, mundo.") == [0, 0, 1, 1]
    assert map_pieces_to_words(["\u2581Ho", "la", "\u2581mundo"], "Hola mundo") == [0, 0, 1]


def test_collate_builds_shifted_targets():
    batch = collate([[5, 6, 7], [8]], [[9, 10], [11, 12, 13]], [0, 1])
    assert batch.src.tolist() == [[5, 6, 7], [8, PAD, PAD]]
    assert batch.src_lengths.tolist() == [3, 1]
    assert batch.tgt_in.tolist() == [[BOS, 9, 10, PAD], [BOS, 11, 12, 13]]
    assert batch.tgt_out.tolist() == [[9, 10, EOS, PAD], [11, 12, 13, EOS]]
    assert batch.target_tokens == 7


def test_length_filter_and_buckets():
    src = [[1] * n for n in (3, 60, 10, 4, 9)]
    tgt = [[1] * n for n in (3, 5, 70, 4, 8)]
    fs, ft, dropped = filter_by_length(src, tgt, 50)
    assert dropped == 2 and len(fs) == 3
    src = [[4] * (i % 20 + 1) for i in range(200)]
    batches = make_batches(src, src, 16, "sents", shuffle=True, seed=3, epoch=1)
    assert sorted(i for b in batches for i in b) == list(range(200))
    assert all(len(b) <= 16 for b in batches)
    # buckets group similar lengths
    spread = [max(len(src[i]) for i in b) - min(len(src[i]) for i in b) for b in batches]
    assert sum(spread) / len(spread) < 4
    # deterministic per (seed, epoch), different across epochs
    assert batches == make_batches(src, src, 16, "sents", True, 3, 1)
    assert batches != make_batches(src, src, 16, "sents", True, 3, 2)
    by_tokens = make_batches(src, src, 64, "tokens", shuffle=False)
    assert all(len(b) * max(len(src[i]) + 1 for i in b) <= 64 for b in by_tokens)


def test_lowercase_tokenizers_lower_every_text_they_read(tmp_path):
    """data.lowercase lives in the tokenizer: it builds on lower-cased text and lower-cases what
    it encodes or splits, so no caller checks the flag (pieces given to encode_pieces stay)."""
    word = WordTokenizer.build(["The Cat, the dog."], max_size=100, lowercase=True)
    assert "The" not in word.tokens and "cat" in word.tokens
    assert word.encode("THE CAT") == word.encode("the cat") and UNK not in word.encode("The Cat")
    assert word.split_with_words("The Cat,") == (["the", "cat", ","], [0, 1, 1])
    word.save(tmp_path, "src")
    assert load_tokenizer(tmp_path, "src", lowercase=True).encode("The Dog") == word.encode("the dog")
    assert UNK in load_tokenizer(tmp_path, "src").encode("The Dog")  # a cased run reads it as it is
    lines = [f"Word{i % 7} And More Text {i}" for i in range(200)]
    spm = SentencePieceTokenizer.build(lines, tmp_path / "m", vocab_size=60, lowercase=True)
    assert not any(c.isupper() for i in range(len(spm)) for c in spm.piece(i))
    assert spm.encode("WORD3 AND text") == spm.encode("word3 and text")
    assert spm.split("And") == spm.split("and")
    spm.save(tmp_path, "tgt")
    assert load_tokenizer(tmp_path, "tgt", lowercase=True).encode("TEXT") == spm.encode("text")


def test_a_lowercase_run_reads_cased_input_through_its_tokenizers(tiny_corpus, tmp_path):
    """Trained with data.lowercase, a run's loaded tokenizers lower-case: translate, perplexity
    and the source limit see 'The Red Cat' as 'the red cat'."""
    from attnmt.decode.translate import Translator
    from attnmt.eval.perplexity import encode_texts
    from attnmt.runs.loader import load_run
    from attnmt.train.run import run_training

    run_dir = tmp_path / "lower"
    run_training(str(tiny_corpus.config), str(run_dir),
                 ["data.lowercase=true", "train.max_steps=3", "train.valid_every=0"], resume=False)
    run = load_run(run_dir)
    assert run.src_tok.lowercase and run.tgt_tok.lowercase
    assert run.network is run.model and run.ngram_head is None and run.ngram is None  # no NgramRes
    assert run.source("The Red CAT").ids == run.source("the red cat").ids
    assert UNK not in run.source("The Red CAT").ids
    src, tgt, words = encode_texts(run, ["The Cat"], ["El Gato"])
    assert (src, tgt, words) == encode_texts(run, ["the cat"], ["el gato"])
    translator = Translator.of(run)
    upper, lower = (translator.translate([x], beam=1)[0][0].text for x in ("The Red Cat", "the red cat"))
    assert upper == lower
