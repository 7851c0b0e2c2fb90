"""OCTET_NUM_THREADS, the CPU backend's thread count (default: this machine's cores): any whole
number >= 1 trains; anything else is one line naming the variable, exit 2, before any work."""
import os

from cli_util import TINY_MODEL, assert_one_line_error, octet_at, sets


def train(tmp, out, threads):
    (tmp / "corpus.txt").write_text("the kernel maps a page into user space.\n" * 200)
    return octet_at(tmp, "train", *sets(*TINY_MODEL, f"data.path={tmp / 'corpus.txt'}", "train.steps=2",
                                       "train.eval_every=2"), "--out", tmp / out,
                    env={"OCTET_NUM_THREADS": threads})


def test_thread_counts_train(tmp_path):
    for n in ("1", "3"):
        r = train(tmp_path, f"run{n}", n)
        assert r.returncode == 0, r.stderr


def test_invalid_thread_count_is_one_line(tmp_path):
    for bad in ("0", "-2", "two", ""):
        r = train(tmp_path, "bad", bad)
        assert_one_line_error(r, "OCTET_NUM_THREADS")
        assert not (tmp_path / "bad").exists()
