"""Corpus builders (attnmt data bible / domains): a whole bible build against a fake ``mod2imp``
(no network, no apt, no real SWORD modules), what a build may overwrite, the domain corpora and
the package installs. The Bible's text handling is in tests/test_bible_text.py."""

from __future__ import annotations

import json
import os
import random
import stat
import sys
from pathlib import Path

import pytest

from attnmt.corpora import bible, domain_text, domains, outputs
from attnmt.corpora.sword import SwordTools
from attnmt.errors import UserError


# ---------------------------------------------------------------- whole build, fake mod2imp

_BOOKS = {"Genesis": "Gen", "Joshua": "Josh", "Judges": "Judg", "Hebrews": "Heb"}


def _fixture_modules(root: Path) -> SwordTools:
    """Three tiny modules (KJV, WEB, Spanish) in four books, and a fake mod2imp printing them."""
    rng = random.Random(5)
    mods = {"engKJV2006eb": [], "engWEB2015eb": [], "spaRV1909eb": []}
    for book in _BOOKS:
        for c in (1, 2):
            for v in range(1, 6):
                nums = [f"H{rng.randrange(1, 9000):04d}" for _ in range(5)]
                ws = " ".join(f'<w lemma="strong:{n}">w{i}</w>' for i, n in enumerate(nums))
                head = "$$$" + f"{book} {c}:{v}\n"
                mods["engKJV2006eb"].append(head + f"KJV {book} {c}:{v} {ws}.\n")
                mods["engWEB2015eb"].append(
                    head + f"WEB {book} {c}:{v} {ws}.<note>a note</note>\n"
                )
                opening = "EN" if v == 1 else "en"
                mods["spaRV1909eb"].append(head + f"{opening} {book} {c}:{v} {ws}.\n")
    (root / "mods.d").mkdir(parents=True)
    for name, entries in mods.items():
        (root / f"{name}.imp").write_text("$$$[ Module Heading ]\n" + "".join(entries), "utf-8")
        (root / "mods.d" / f"{name.lower()}.conf").write_text(
            f"[{name}]\nVersion=1.0\nDistributionLicense=Public Domain\n", "utf-8"
        )
    exe = root / "fake-mod2imp"
    exe.write_text(
        f"#!{sys.executable}\nimport os, sys\n"
        "sys.stdout.write(open(os.path.join(os.environ['SWORD_PATH'], sys.argv[1] + '.imp'),"
        " encoding='utf-8').read())\n"
    )
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return SwordTools(mod2imp=str(exe), sword_path=str(root))


def quiet(_msg: str) -> None:
    pass


def _snapshot(d: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(d.iterdir())}


def test_build_bible_end_to_end_and_idempotent(tmp_path):
    tools = _fixture_modules(tmp_path / "sword")
    out = tmp_path / "bible"
    info = bible.build_bible(out, tools=tools, install=False, say=quiet)
    assert info["splits"]["train"]["pairs"] == 10 and info["splits"]["dev"]["pairs"] == 10
    assert info["splits"]["test"]["pairs"] == 20
    en = (out / "train.en").read_text("utf-8").splitlines()
    es = (out / "train.es").read_text("utf-8").splitlines()
    keys = (out / "train.keys").read_text("utf-8").splitlines()
    assert len(en) == len(es) == len(keys) == 10
    assert keys[0] == "Gen.1.1" and en[0] == "WEB Genesis 1:1 w0 w1 w2 w3 w4."
    assert es[0].startswith("En Genesis 1:1")
    before = _snapshot(out)
    bible.build_bible(out, tools=tools, install=False, say=quiet)
    assert _snapshot(out) == before  # nothing rewritten
    bible.build_bible(out, tools=tools, install=False, force=True, say=quiet)
    assert {k: v[0] for k, v in _snapshot(out).items()} == {k: v[0] for k, v in before.items()}
    # a changed output (damaged, or edited by its user) is not replaced without force
    (out / "dev.es").write_text("tampered\n", "utf-8")
    assert not outputs.is_complete(out, outputs.read_manifest(out)["config"])
    with pytest.raises(UserError, match="dev.es: already exists with other content"):
        bible.build_bible(out, tools=tools, install=False, say=quiet)
    assert (out / "dev.es").read_text("utf-8") == "tampered\n"
    bible.build_bible(out, tools=tools, install=False, force=True, say=quiet)
    assert (out / "dev.es").read_bytes() == before["dev.es"][0]
    # KJV English side
    bible.build_bible(tmp_path / "kjv", english="kjv", tools=tools, install=False, say=quiet)
    assert (tmp_path / "kjv" / "train.en").read_text("utf-8").startswith("KJV Genesis 1:1")


def test_missing_reader_or_module_is_a_user_error(tmp_path):
    tools = _fixture_modules(tmp_path / "sword")
    with pytest.raises(UserError, match="libsword-utils"):
        bible.build_bible(tmp_path / "o", tools=SwordTools(str(tmp_path / "no-such-mod2imp"),
                          tools.sword_path), say=print)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserError, match="sword-text"):
        bible.build_bible(tmp_path / "o", tools=SwordTools(tools.mod2imp, str(empty)), say=print)
    assert not (tmp_path / "o" / "train.en").exists()


def test_cli_reports_missing_tool_in_one_line(tmp_path, capsys):
    from attnmt.cli.main import main

    code = main(["data", "bible", "--out", str(tmp_path / "o"), "--mod2imp", str(tmp_path / "nope")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].startswith("attnmt: error: ") and "nope" in err[-1]


def test_builds_leave_no_temporary_files(tmp_path):
    tools = _fixture_modules(tmp_path / "sword")
    bible.build_bible(tmp_path / "b", tools=tools, install=False, say=quiet)
    assert sorted(os.listdir(tmp_path / "b")) == sorted(
        [f"{s}.{e}" for s in ("train", "dev", "test") for e in ("en", "es", "keys")]
        + ["align_log.tsv", "manifest.json"]
    )


def _refused(root: Path, argv: list[str], words: tuple[str, ...]) -> None:
    """The build stops as a user error (status 2, its last line an error naming ``words``, after
    the progress lines) and nothing under ``root`` changes."""
    from bad_input_zoo import run_cli

    def state():
        return {p: (p.read_bytes() if p.is_file() else None) for p in root.rglob("*")}

    before = state()
    status, out, err = run_cli(argv)
    assert status == 2 and "Traceback" not in err and out == "", (status, err)
    last = err.strip().splitlines()[-1]
    assert last.startswith("attnmt: error: ") and all(w in last for w in words), last
    assert state() == before


def test_bible_never_overwrites_other_files_without_force(tmp_path):
    """attnmt data bible wrote DIR/train.en (...) over a user's own file of the same name, and over
    a build with other settings (--english kjv over web), without a word."""
    from bad_input_zoo import run_cli

    tools = _fixture_modules(tmp_path / "sword")
    out = tmp_path / "b"
    out.mkdir()
    (out / "train.en").write_text("my own corpus\n", "utf-8")
    argv = ["data", "bible", "--out", str(out), "--mod2imp", tools.mod2imp, "--sword-path", tools.sword_path]
    _refused(tmp_path, argv, (str(out / "train.en"), "--force"))
    assert [p.name for p in out.iterdir()] == ["train.en"]  # refused before anything was written
    assert (out / "train.en").read_text("utf-8") == "my own corpus\n"
    assert run_cli(argv + ["--force"])[0] == 0
    built = _snapshot(out)
    assert built["train.en"][0].startswith(b"WEB Genesis")
    # the same settings without a manifest (a build cut off before it): same bytes, nothing rewritten
    (out / "manifest.json").unlink()
    status, _, err = run_cli(argv)
    assert status == 0, err
    now = _snapshot(out)
    assert now.pop("manifest.json")[0] == built["manifest.json"][0]
    assert now == {k: v for k, v in built.items() if k != "manifest.json"}
    # another build of the same --english (here: an older format) is this builder's: replaced
    man = outputs.read_manifest(out)
    (out / "train.en").write_text("an older format\n", "utf-8")
    man["config"]["format"], man["files"]["train.en"] = 0, outputs.sha256_file(out / "train.en")
    (out / "manifest.json").write_text(json.dumps(man), "utf-8")
    assert run_cli(argv)[0] == 0
    assert {k: v[0] for k, v in _snapshot(out).items()} == {k: v[0] for k, v in built.items()}
    # a build with other settings is not
    before = _snapshot(out)
    _refused(tmp_path, argv + ["--english", "kjv"], ("train.en: already exists", "--force"))
    assert _snapshot(out) == before
    assert run_cli(argv + ["--english", "kjv", "--force"])[0] == 0
    assert (out / "train.en").read_text("utf-8").startswith("KJV Genesis")


# ---------------------------------------------------------------- domains


def test_split_lines_blocks_ratio_and_determinism():
    lines = [f"line {i}" for i in range(10000)]
    s = domains.split_lines(lines)
    assert [len(s[k]) for k in ("train", "dev", "test")] == [9000, 500, 500]
    assert s == domains.split_lines(lines)
    # blocks of 50 lines: the 10th and 20th of every 20 blocks
    assert s["dev"][:50] == [f"line {i}" for i in range(450, 500)]
    assert s["test"][0] == "line 950" and s["dev"][50] == "line 1450"
    assert sorted(s["train"] + s["dev"] + s["test"]) == sorted(lines)
    small = domains.split_lines([str(i) for i in range(40)])  # blocks of one line
    assert small["dev"] == ["9", "29"] and small["test"] == ["19", "39"]


def test_add_user_domain_idempotent_and_errors(tmp_path):
    text = tmp_path / "mine.txt"
    text.write_text("".join(f"  sentence   number {i}\n\n" for i in range(100)), "utf-8")
    out = tmp_path / "dom"
    res = domains.build_domains(out, domains=[], added=[domains.parse_add(f"legal2={text}")],
                                say=quiet)
    assert res["legal2"]["train"]["lines"] == 90 and res["legal2"]["test"]["lines"] == 5
    assert (out / "legal2" / "dev.txt").read_text("utf-8").splitlines()[0] == "sentence number 9"
    before = _snapshot(out / "legal2")
    domains.build_domains(out, domains=[], added=[("legal2", text)], say=quiet)
    assert _snapshot(out / "legal2") == before
    text.write_text("".join(f"changed {i}\n" for i in range(100)), "utf-8")  # new source: rebuilt
    domains.build_domains(out, domains=[], added=[("legal2", text)], say=quiet)
    assert (out / "legal2" / "train.txt").read_text("utf-8").startswith("changed 0\n")

    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\nbad \xff byte\n")
    with pytest.raises(UserError, match=r"bad\.txt:2: invalid UTF-8"):
        domains.build_domains(out, domains=[], added=[("bad", bad)], say=quiet)
    short = tmp_path / "short.txt"
    short.write_text("one\ntwo\n", "utf-8")
    with pytest.raises(UserError, match="need at least"):
        domains.build_domains(out, domains=[], added=[("short", short)], say=quiet)
    with pytest.raises(UserError, match="nope.txt: file not found"):
        domains.build_domains(out, domains=[], added=[("x", tmp_path / "nope.txt")], say=quiet)
    for spec in ("noequals", "man=x.txt", "=x.txt", "a b=x.txt"):
        with pytest.raises(UserError):
            domains.parse_add(spec)
    with pytest.raises(UserError, match="unknown domain"):
        domains.build_domains(out, domains=["recipes"], say=quiet)


def test_bible_domain_reuses_the_book_split(tmp_path):
    tools = _fixture_modules(tmp_path / "sword")
    bible.build_bible(tmp_path / "bible", tools=tools, install=False, say=quiet)
    res = domains.build_domains(tmp_path / "dom", domains=["bible"], bible_dir=tmp_path / "bible",
                                say=quiet)
    assert res["bible"]["dev"]["lines"] == 10
    for split in ("train", "dev", "test"):
        assert (tmp_path / "dom" / "bible" / f"{split}.txt").read_bytes() == (
            tmp_path / "bible" / f"{split}.en"
        ).read_bytes()


def test_bible_dir_must_be_a_finished_bible_build(tmp_path):
    """A mistyped --bible built the whole Bible into the typo (exit 0); another build's directory
    failed with a KeyError traceback; --domains none without --add built nothing and said done."""
    tools = _fixture_modules(tmp_path / "sword")
    bible.build_bible(tmp_path / "bible", tools=tools, install=False, say=quiet)
    domains.build_domains(tmp_path / "dom", domains=["bible"], bible_dir=tmp_path / "bible", say=quiet)
    for wrong, words in ((tmp_path / "bibel", "no such directory"),
                         (tmp_path / "dom" / "bible", "not a complete 'attnmt data bible' output")):
        with pytest.raises(UserError, match=words):
            domains.build_domains(tmp_path / "dom2", domains=["bible"], bible_dir=wrong, say=quiet)
    (tmp_path / "bible" / "dev.en").write_text("changed\n", "utf-8")  # no longer what its manifest says
    with pytest.raises(UserError, match="not a complete"):
        domains.build_domains(tmp_path / "dom2", domains=["bible"], bible_dir=tmp_path / "bible", say=quiet)
    with pytest.raises(UserError, match="--domains leaves out"):
        domains.build_domains(tmp_path / "dom2", domains=["man"], bible_dir=tmp_path / "bible", say=quiet)
    with pytest.raises(UserError, match="nothing to build"):
        domains.build_domains(tmp_path / "dom2", domains=[], say=quiet)
    assert not (tmp_path / "bibel").exists() and not (tmp_path / "dom2").exists()


def test_man_page_paragraphs():
    rendered = (
        "LS(1)        User Commands        LS(1)\n\nNAME\n       ls - list directory contents\n\n"
        "SYNOPSIS\n       ls [OPTION]... [FILE]...\n\nDESCRIPTION\n"
        "       List information about the FILEs (the current directory by default).\n\n"
        "       -a, --all\n              do not ignore entries starting with .\n\n"
        "       -l     use a long listing format\n\n"
        "SEE ALSO\n       Full documentation is available locally via info and more text.\n"
    )
    assert list(domain_text.man_paragraphs(rendered)) == [
        "ls - list directory contents",
        "List information about the FILEs (the current directory by default).",
        "-a, --all do not ignore entries starting with .",  # an option's lines join
        "-l use a long listing format",
    ]  # SYNOPSIS and SEE ALSO skipped, the page header is not a paragraph


def test_html_paragraphs_skip_code_and_navigation():
    page = (
        "<html><head><title>os — Miscellaneous interfaces</title><script>var x = 1;</script></head>"
        '<body><div class="related"><ul><li>previous page link text here ok</li></ul></div>'
        '<h1>The os module and its many uses<a class="headerlink" href="#x">¶</a></h1>'
        "<p>This module provides a <code>portable</code> way of using\n operating system "
        "functionality.</p><pre>import os\nos.listdir('.') # a comment with words</pre>"
        "<ul><li>Each item of this list is prose.</li><li>x = f(y)</li></ul></body></html>"
    )
    assert domain_text.html_paragraphs(page) == [
        "The os module and its many uses",
        "This module provides a portable way of using operating system functionality.",
        "Each item of this list is prose.",
    ]


def test_licence_paragraphs_front_matter_and_language():
    lic = (
        "---\nkey: mit\nshort_name: MIT License\n---\n\nPermission is hereby granted, free of"
        "\ncharge, to any person.\n\nTHE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY.\n\n"
        "Copyright (c) <year> <name>\n"
    )
    assert domain_text.licence_paragraphs(lic) == [
        "Permission is hereby granted, free of charge, to any person.",
        'THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY.',
    ]
    german = "---\nkey: x\nlanguage: de\n---\nDie Software wird ohne jede Gewährleistung geliefert.\n"
    assert domain_text.licence_paragraphs(german) == []
    assert list(domain_text.unique(["a", "b", "a"])) == ["a", "b"]


def test_builtin_domain_output_does_not_depend_on_other_domains(tmp_path, monkeypatch):
    def fake(pkg):
        def produce(src):
            src.versions[pkg] = "1.0"
            return iter([f"{pkg} paragraph number {i} of prose" for i in range(60)] * 2)

        return produce

    monkeypatch.setitem(domains.PRODUCERS, "man", fake("manpages"))
    monkeypatch.setitem(domains.PRODUCERS, "pydoc", fake("python3.11-doc"))
    both = domains.build_domains(tmp_path / "a", domains=["man", "pydoc"], say=quiet)
    domains.build_domains(tmp_path / "b", domains=["pydoc"], say=quiet)
    assert both["pydoc"]["train"]["lines"] == 54  # duplicates dropped: 60 lines, 90/5/5
    for f in ("train.txt", "dev.txt", "test.txt", "manifest.json"):
        assert (tmp_path / "a" / "pydoc" / f).read_bytes() == (tmp_path / "b" / "pydoc" / f).read_bytes()
    info = outputs.read_manifest(tmp_path / "a" / "pydoc")["info"]
    assert info["versions"] == {"python3.11-doc": "1.0"}


# -- no system changes unless asked (issue 14) ---------------------------------------------------------------
class _FakeApt:
    """Records the commands debian._run would run; apt-get download 'fetches' a .deb into cwd."""

    def __init__(self, fail_first: bool = False):
        self.calls: list[list[str]] = []
        self.fail_first = fail_first

    def __call__(self, cmd, cwd=None):
        import subprocess

        self.calls.append(list(cmd))
        if self.fail_first and len(self.calls) == 1:
            return subprocess.CompletedProcess(cmd, 100, "", "E: Unable to locate package x")
        if "download" in cmd:
            for pkg in cmd[cmd.index("download") + 1:]:
                (Path(cwd) / f"{pkg}_1.0-1_all.deb").write_bytes(b"deb")
        return subprocess.CompletedProcess(cmd, 0, "", "")


def test_missing_packages_are_listed_not_installed(monkeypatch):
    from attnmt.corpora import debian

    fake = _FakeApt()
    monkeypatch.setattr(debian, "_run", fake)
    monkeypatch.setattr(debian, "is_root", lambda: True)
    with pytest.raises(UserError, match=r"needs the Debian packages a, b; install them \(as root: "
                                         r"apt-get install a b\) or pass --install"):
        debian.install_packages(["b", "a"], "attnmt data bible")
    assert fake.calls == []  # nothing ran: not even apt-get update


def test_install_keeps_apts_sandbox(monkeypatch):
    from attnmt.corpora import debian

    fake = _FakeApt(fail_first=True)
    monkeypatch.setattr(debian, "_run", fake)
    monkeypatch.setattr(debian, "is_root", lambda: True)
    monkeypatch.setattr(debian, "_need_tool", lambda name, package: name)
    debian.install_packages(["x"], "attnmt data bible", install=True)
    assert [c[1:] for c in fake.calls] == [
        ["-q", "install", "-y", "--no-install-recommends", "x"], ["-q", "update"],
        ["-q", "install", "-y", "--no-install-recommends", "x"]]
    assert not any("Sandbox" in " ".join(c) for c in fake.calls)


def test_downloads_do_not_update_lists_unless_asked_and_use_a_sandbox_folder(monkeypatch, tmp_path):
    from attnmt.corpora import debian

    fake = _FakeApt(fail_first=True)
    monkeypatch.setattr(debian, "_run", fake)
    monkeypatch.setattr(debian, "is_root", lambda: False)
    monkeypatch.setattr(debian, "_need_tool", lambda name, package: name)
    with pytest.raises(UserError, match="apt-get update, or pass --install"):
        debian.download_debs(["manpages"], tmp_path / "debs")
    assert len(fake.calls) == 1 and list((tmp_path / "debs").iterdir()) == []
    fake = _FakeApt()
    monkeypatch.setattr(debian, "_run", fake)
    debs = debian.download_debs(["manpages"], tmp_path / "debs")
    assert [d.name for d in debs] == ["manpages_1.0-1_all.deb"]
    assert sorted(p.name for p in (tmp_path / "debs").iterdir()) == ["manpages_1.0-1_all.deb"]


def test_pip_downloads_are_wheels_only(monkeypatch, tmp_path):
    import subprocess

    from attnmt.corpora import debian

    calls = []

    def pip(cmd, cwd=None):
        calls.append(list(cmd))
        dest = Path(cmd[cmd.index("-d") + 1])
        (dest / "scancode_toolkit-32.0.0-py3-none-any.whl").write_bytes(b"whl")
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(debian, "_run", pip)
    assert debian.pip_download("scancode-toolkit==32.0.0", tmp_path).name.endswith(".whl")
    assert "--only-binary=:all:" in calls[0] and "--no-deps" in calls[0]


def test_data_bible_without_install_names_the_packages(tmp_path, monkeypatch, capsys):
    from attnmt.cli.main import main
    from attnmt.corpora import debian
    from attnmt.corpora.sword import SwordTools

    monkeypatch.setattr(SwordTools, "has_reader", lambda self: False)
    monkeypatch.setattr(SwordTools, "has_module", lambda self, name: False)
    ran = []
    monkeypatch.setattr(debian, "_run", lambda cmd, cwd=None: ran.append(cmd))
    assert main(["data", "bible", "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "libsword-utils" in err and "--install" in err, err
    assert ran == [] and not (tmp_path / "b").exists()


def test_domains_never_overwrite_other_files_without_force(tmp_path, monkeypatch):
    """attnmt data domains wrote DIR/<domain>/train.txt (...) over files it had not written."""
    from bad_input_zoo import run_cli

    monkeypatch.setitem(domains.PRODUCERS, "man", lambda src: iter(f"man paragraph {i} of prose" for i in range(60)))
    text = tmp_path / "notes.txt"
    text.write_text("".join(f"note number {i}\n" for i in range(40)), "utf-8")
    out = tmp_path / "dom"
    (out / "notes").mkdir(parents=True)
    (out / "notes" / "train.txt").write_text("my own notes\n", "utf-8")
    argv = ["data", "domains", "--out", str(out), "--domains", "man", "--add", f"notes={text}"]
    _refused(tmp_path, argv, (str(out / "notes" / "train.txt"), "--force"))
    # the domain holding that file was built first: the other one was not written either
    assert [p.name for p in out.iterdir()] == ["notes"]
    assert [p.name for p in (out / "notes").iterdir()] == ["train.txt"]
    status, _, err = run_cli(argv + ["--force"])
    assert status == 0, err
    assert (out / "notes" / "train.txt").read_text("utf-8").startswith("note number 0\n")
    # a changed --add file replaces its domain's earlier build (no --force: that build is ours)
    text.write_text("".join(f"changed note {i}\n" for i in range(40)), "utf-8")
    assert run_cli(argv)[0] == 0
    assert (out / "notes" / "train.txt").read_text("utf-8").startswith("changed note 0\n")
    # an output edited since is not
    (out / "man" / "dev.txt").write_text("edited\n", "utf-8")
    _refused(tmp_path, argv, (str(out / "man" / "dev.txt"), "--force"))
    assert (out / "man" / "dev.txt").read_text("utf-8") == "edited\n"
    assert run_cli(argv + ["--force"])[0] == 0
    assert (out / "man" / "dev.txt").read_text("utf-8") != "edited\n"
