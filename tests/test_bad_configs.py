"""The malformed-input zoo, configs and training corpora: bad YAML, bad values as config lines and
``--set`` overrides, bad training and experiment corpora. Each case ends with exit status 2 and
one line ``attnmt: error: ...`` naming the file (or key): see tests/test_bad_input.py."""

from __future__ import annotations


import pytest

from bad_input_zoo import BAD_TEXT, EMPTY_TEXT, assert_fails, copy_corpus, train_argv


BAD_CONFIGS = [
    # (name, YAML text or bytes, words: the file name plus these)
    ("not-utf8", b"model:\n  type: \xff\n", ("UTF-8",)),
    ("malformed", "model:\n  layers: [1,\n", ("malformed YAML",)),
    ("tab-indent", "model:\n\tlayers: 1\n", ("malformed YAML",)),
    ("a-list", "- data\n- model\n", ("mapping",)),
    ("a-string", "hello\n", ("mapping",)),
    ("unknown-section", "bogus: 1\n", ("unknown section 'bogus'",)),
    ("unknown-key", "model:\n  hiddn: 3\n", ("model.hiddn",)),
    ("section-not-mapping", "model: 3\n", ("'model' must be a mapping",)),
    ("bad-task", "task: dance\n", ("task",)),
    ("wrong-type-int", "model:\n  layers: two\n", ("model.layers", "expected int")),
    ("wrong-type-bool", "model:\n  input_feed: maybe\n", ("model.input_feed",)),
    ("float-for-int", "model:\n  layers: 1.5\n", ("model.layers",)),
    ("list-for-str", "data:\n  src: [en]\n", ("data.src",)),
    ("duplicate-key", "model:\n  layers: 1\n  layers: 2\n", ("duplicate", "model.layers")),
    ("duplicate-section", "model:\n  layers: 1\nmodel:\n  hidden: 8\n", ("duplicate", "model")),
    ("yaml-tag", "model: !!python/object:os.system ls\n", ("",)),
    ("anchor-bomb", "a: &a [x, x]\nb: &b [*a, *a]\nmodel: *b\n", ("",)),
]

# Values that pass YAML but make no sense: each is a --set override and a config line.
BAD_VALUES = [
    ("model.attention", "bogus"), ("model.score", "bogus"), ("model.type", "rnn"),
    ("model.local_composition", "x"), ("model.norm", "mid"), ("model.positions", "rotary"),
    ("model.enc_self_attention", "magic"), ("model.window_mask", "x"),
    ("model.dropout", "5"), ("model.dropout", "-0.1"), ("model.dropout", "nan"),
    ("model.layers", "0"), ("model.hidden", "-4"), ("model.embed", "0"), ("model.heads", "0"),
    ("model.window", "-1"), ("model.max_src_len", "0"),
    ("train.lr", "nan"), ("train.lr", "-1"), ("train.lr", "inf"), ("train.lr", "0"),
    ("train.epochs", "0"), ("train.batch_size", "0"), ("train.accumulate", "0"),
    ("train.clip", "-1"), ("train.label_smoothing", "1.5"), ("train.decay", "0"),
    ("train.max_time", "-5"), ("train.max_steps", "-1"), ("train.log_every", "0"),
    ("train.device", "tpu"), ("train.device", "cuda:x"), ("train.optimizer", "lion"),
    ("train.batch_by", "words"), ("train.loss_norm", "x"), ("train.threads", "-2"),
    ("data.max_len", "0"), ("data.src_vocab_size", "0"), ("data.tgt_vocab_size", "-1"),
    ("data.tokenizer", "chars"), ("data.src", ""), ("ngram.mode", "mix"), ("ngram.order", "0"),
    ("ngram.lam", "2"), ("ngram.alpha", "nan"),
]

BAD_SETS = [
    ("no-equals", "train.lr", ("--set",)),
    ("no-section", "lr=3", ("--set",)),
    ("three-parts", "a.b.c=1", ("--set",)),
    ("unknown-section", "bogus.lr=3", ("bogus",)),
    ("unknown-key", "train.lrr=3", ("train.lrr",)),
    ("malformed-yaml", "train.lr=[", ("--set", "train.lr")),
    ("malformed-yaml-brace", "model.hidden={a", ("--set", "model.hidden")),
    ("wrong-type", "model.layers=two", ("model.layers",)),
    ("a-list", "model.layers=[1, 2]", ("model.layers",)),
    ("a-mapping", "train.lr={a: 1}", ("train.lr",)),
    ("bad-task", "task=dance", ("task",)),
]


# -- configs and --set ----------------------------------------------------------------------------------------
def _config_with(tiny_corpus, extra: str = "") -> str:
    return tiny_corpus.config.read_text() + extra


@pytest.mark.parametrize("name,text,words", BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS])
def test_bad_config(name, text, words, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_bytes(text if isinstance(text, bytes) else text.encode())
    assert_fails(tmp_path, ["train", str(cfg), "--out", str(tmp_path / "run")], (str(cfg), *words))


@pytest.mark.parametrize("kind", ["missing", "directory", "empty-path"])
def test_config_path_is_not_a_file(kind, tmp_path):
    cfg = tmp_path / "c.yaml"
    if kind == "directory":
        cfg.mkdir()
    arg = "" if kind == "empty-path" else str(cfg)
    assert_fails(tmp_path, ["train", arg, "--out", str(tmp_path / "run")], ())


@pytest.mark.parametrize("key,value", BAD_VALUES, ids=[f"{k}={v}" for k, v in BAD_VALUES])
def test_bad_value_as_set_and_in_config(key, value, tmp_path, tiny_corpus):
    run = tmp_path / "run"
    assert_fails(tmp_path, ["train", str(tiny_corpus.config), "--out", str(run), "--set",
                            f"{key}={value}"], (key,))
    import yaml

    section, name = key.split(".")
    raw = yaml.safe_load(tiny_corpus.config.read_text())
    raw.setdefault(section, {})[name] = yaml.safe_load(value) if value else ""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    line = cfg.read_text().splitlines().index(f"  {name}: {yaml.safe_dump(raw[section][name]).split(chr(10))[0]}") + 1
    assert_fails(tmp_path, ["train", str(cfg), "--out", str(run)], (f"{cfg}:{line}:", key))


@pytest.mark.parametrize("name,item,words", BAD_SETS, ids=[c[0] for c in BAD_SETS])
def test_bad_set_override(name, item, words, tmp_path, tiny_corpus):
    assert_fails(tmp_path, ["train", str(tiny_corpus.config), "--out", str(tmp_path / "run"), "--set",
                            item], words)


@pytest.mark.parametrize("name,item,words", BAD_SETS[:6], ids=[c[0] for c in BAD_SETS[:6]])
def test_bad_set_in_experiment(name, item, words, tmp_path, tiny_corpus):
    d = tiny_corpus.directory
    assert_fails(tmp_path, ["experiment", "luong", "--train", str(d / "train"), "--dev", str(d / "dev"),
                            "--test", str(d / "dev"), "--out", str(tmp_path / "exp"), "--set", item,
                            "--rows", "base", "--steps", "1"], words)

# -- training corpora ----------------------------------------------------------------------------------------
def _corpus_cases():
    for side in ("train.en", "train.es", "dev.en", "dev.es"):
        for bad in BAD_TEXT + EMPTY_TEXT:
            yield pytest.param(side, bad, id=f"{side}-{bad.name}")


@pytest.mark.parametrize("side,bad", list(_corpus_cases()))
def test_bad_training_corpus(side, bad, tmp_path, tiny_corpus):
    c = copy_corpus(tmp_path, tiny_corpus)
    path = c / side
    path.unlink()
    bad.make(path)
    where = f"{path}:{bad.line}:" if bad.line else str(path)
    assert_fails(tmp_path, train_argv(tmp_path, c), (where, *bad.words))


@pytest.mark.parametrize("what,make,words", [
    ("line counts", lambda c: (c / "train.es").write_text("uno\ndos\n"), ("train.en has", "train.es has 2")),
    ("dev line counts", lambda c: (c / "dev.en").write_text("a\n"), ("dev.en has 1", "dev.es has")),
    ("tsv without tab", lambda c: (c / "train.tsv").write_text("a\tb\nno tab here\n"), ("train.tsv:2:", "tab")),
    ("tsv ragged columns", lambda c: (c / "train.tsv").write_text("a\tb\n\nc\td\te\n"),
     ("train.tsv:3:", "3 tab-separated columns, line 1 has 2")),
    ("no pairs", lambda c: ((c / "train.en").write_text("a\n\n"), (c / "train.es").write_text("\nb\n")),
     ("train.en", "no non-empty")),
])
def test_bad_parallel_corpus(what, make, words, tmp_path, tiny_corpus):
    c = copy_corpus(tmp_path, tiny_corpus)
    make(c)
    argv = train_argv(tmp_path, c)
    if what.startswith("tsv"):
        argv += ["--set", f"data.train={c}/train.tsv"]
    assert_fails(tmp_path, argv, words)


def test_bad_experimentcopy_corpus(tmp_path, tiny_corpus):
    c = copy_corpus(tmp_path, tiny_corpus)
    (c / "train.es").write_bytes(b"\xff\n")
    assert_fails(tmp_path, ["experiment", "luong", "--train", str(c / "train"), "--dev", str(c / "dev"),
                            "--test", str(c / "dev"), "--out", str(tmp_path / "exp"), "--rows", "base",
                            "--steps", "1"], (f"{c / 'train.es'}:1:", "UTF-8"))
    assert_fails(tmp_path, ["experiment", "luong", "--train", str(c / "nope"), "--dev", str(c / "dev"),
                            "--test", str(c / "dev"), "--out", str(tmp_path / "exp"), "--rows", "base"],
                 (str(c / "nope"),))


@pytest.mark.parametrize("extra,words", [
    (["--steps", "-1"], ("--steps",)), (["--hidden", "0"], ("--hidden",)), (["--beam", "0"], ("--beam",)),
    (["--test-lines", "-1"], ("--test-lines",)), (["--threads", "-1"], ("--threads",)),
    (["--set", "model.layers=0"], ("model.layers",)), (["--dict", "{d}/none.tsv"], ("none.tsv",)),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_bad_experiment_flags_write_nothing(extra, words, tmp_path, tiny_corpus):
    """Each failed in the first row's generated config after OUT/configs and the test files were
    written (--steps, --hidden, --threads, a --set), or ran: --beam 0, --test-lines -1 (the last test
    line dropped) and an unused --dict that does not exist."""
    d = tiny_corpus.directory
    assert_fails(tmp_path, ["experiment", "luong", "--train", str(d / "train"), "--dev", str(d / "dev"),
                            "--test", str(d / "dev"), "--out", str(tmp_path / "exp"), "--rows", "base",
                            "--steps", "1", *[e.format(d=tmp_path) for e in extra]], words)


def test_a_model_too_large_for_memory_is_a_user_error(tmp_path, tiny_corpus, monkeypatch):
    """model.hidden=1000000000 was a RuntimeError traceback from the allocator (now config.MAXIMA refuses it;
    a million is allowed). The allocation is simulated: a real one might succeed lazily on a machine that
    overcommits memory."""
    from attnmt.models import seq2seq

    def refuse(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't "
                           "allocate memory: you tried to allocate 512000000000 bytes.")

    monkeypatch.setattr(seq2seq, "Seq2Seq", refuse)
    assert_fails(tmp_path, ["train", str(tiny_corpus.config), "--out", str(tmp_path / "run"), "--set",
                            "model.hidden=1000000"],
                 ("does not fit in memory", "model.hidden=1000000", "can't allocate memory"))
