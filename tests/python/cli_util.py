"""Shared helpers of the CLI tests: the octet binary (OCTET_BIN, or build/octet), a runner that
captures its output, the bad-input assertion, --set pairs, and the settings of a tiny byte-level model."""
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OCTET = os.environ.get("OCTET_BIN", str(ROOT / "build" / "octet"))
TINY_MODEL = ["data.tokenizer=byte", "model.n_layer=1", "model.d_model=16", "model.n_head=2",
              "model.n_kv_head=2", "model.d_ff=32", "model.vocab_size=256", "model.seq_len=16",
              "train.batch_size=2", "train.eval_batches=1"]


def octet(*args):
    return subprocess.run([OCTET, *map(str, args)], capture_output=True, text=True)


def sets(*pairs):
    return [a for p in pairs for a in ("--set", p)]


def octet_in(cwd, *args, env=None):
    """Runs octet from the directory `cwd` (optionally with another environment)."""
    return subprocess.run([OCTET, *map(str, args)], capture_output=True, text=True, cwd=cwd, env=env)


def assert_one_line_error(r, *words):
    """Exit code 2 and one line on stderr holding every word; returns the line."""
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


assert_bad_input = assert_one_line_error  # the name the older tests use


def snapshot(d):
    """Every file under the directory d (relative path -> bytes): what 'nothing written' compares."""
    d = Path(d)
    return {str(p.relative_to(d)): (p.read_bytes() if p.is_file() else None) for p in sorted(d.rglob("*"))}


def octet_at(cwd, *args, env=None):
    """Runs octet with the working directory `cwd` and extra environment variables `env`."""
    full = dict(os.environ, **(env or {}))
    return subprocess.run([OCTET, *map(str, args)], capture_output=True, text=True, cwd=cwd, env=full)
