"""tools/corpus.sh: bad arguments are refused before anything is installed, extracted or removed."""
import subprocess

import pytest

from cli_util import ROOT

CORPUS = ROOT / "tools" / "corpus.sh"


@pytest.mark.parametrize("args,msg", [
    (["../etc"], "must be a plain path inside Documentation/"),
    (["admin-guide/../../x"], "must be a plain path inside Documentation/"),
    (["--except=translations", "process"], "--except applies to the whole tree"),
    (["--except=/abs"], "must be a plain path inside Documentation/"),
    (["."], "must be a plain path inside Documentation/"),
    (["-delete"], "must be a plain path inside Documentation/"),
    (["a/./b"], "must be a plain path inside Documentation/"),
    (["admin-guide"], "exists but is not a finished extraction"),  # OUT is there, without OUT.complete
])
def test_bad_arguments_are_refused_first(tmp_path, args, msg):
    out = tmp_path / "corpus"
    out.mkdir()
    (out / "keep.rst").write_text("an earlier, unfinished extraction\n")
    r = subprocess.run(["bash", str(CORPUS), str(out), *args], capture_output=True, text=True)
    assert r.returncode == 2 and msg in r.stderr, r.stderr
    assert (out / "keep.rst").exists()  # nothing removed


def test_no_arguments_prints_the_usage():
    r = subprocess.run(["bash", str(CORPUS)], capture_output=True, text=True)
    assert r.returncode == 2 and "Usage: tools/corpus.sh OUT_DIR" in r.stderr
    for flag in ("-h", "--help"):
        r = subprocess.run(["bash", str(CORPUS), flag], capture_output=True, text=True)
        assert r.returncode == 0 and "Usage: tools/corpus.sh OUT_DIR" in r.stdout


@pytest.mark.parametrize("out", ["", "-x"])
def test_out_must_be_a_path(out):
    r = subprocess.run(["bash", str(CORPUS), out, "process"], capture_output=True, text=True)
    assert r.returncode == 2 and "must be a path" in r.stderr


def test_a_finished_corpus_is_kept(tmp_path):
    out = tmp_path / "c"
    out.mkdir()
    (tmp_path / "c.complete").touch()
    r = subprocess.run(["bash", str(CORPUS), str(out), "admin-guide"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr == ""  # already extracted: nothing to do
    r = subprocess.run(["bash", str(CORPUS), str(out), "../bad"], capture_output=True, text=True)
    assert r.returncode == 2 and "plain path" in r.stderr  # arguments checked all the same
