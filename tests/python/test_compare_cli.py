"""octet compare and plot as a user meets them (docs/training.md §"Comparing
arms"): a non-empty --out is refused with one line unless --resume (finished arms kept, unfinished
ones resumed) or --overwrite (nothing stale kept); a repeated arm is an error; the settings table is
printed once, then per arm only what differs; without gnuplot the results stay (a warning, exit 0);
any plot title works (no shell sees it)."""
import json
import os

import pytest

from cli_util import TINY_MODEL, assert_one_line_error, octet, octet_in, sets, snapshot

TINY = TINY_MODEL + ["train.steps=2", "train.eval_every=2", "train.warmup_steps=1"]


@pytest.fixture()
def config(tmp_path):
    (tmp_path / "c.txt").write_text("".join(f"the queue drains buffer {i % 13} before it stops.\n"
                                            for i in range(200)))
    (tmp_path / "c.toml").write_text('[data]\npath = "c.txt"\ncache_dir = "cache"\n')
    return tmp_path / "c.toml"


def compare(config, out, *extra, arms="bf16,fp8-matched"):
    return octet("compare", "--config", config, *sets(*TINY), "--arms", arms, "--out", out, *extra)


def test_compare_refuses_a_non_empty_out_and_repeated_arms(config, tmp_path):
    out = tmp_path / "cmp"
    r = compare(config, out, arms="bf16,bf16")
    assert_one_line_error(r, "bf16 twice")
    assert not out.exists()
    r = compare(config, out)
    assert r.returncode == 0, r.stderr
    before = snapshot(out)
    r = compare(config, out)
    assert_one_line_error(r, "not empty", "--resume", "--overwrite")
    assert r.stdout == ""
    assert snapshot(out) == before
    r = compare(config, out, "--resume", "--overwrite")
    assert r.returncode == 2 and snapshot(out) == before


@pytest.mark.parametrize("mode", [[], ["--resume"], ["--overwrite"]])
def test_compare_out_naming_a_file_is_refused_as_a_file(config, tmp_path, mode):
    out = tmp_path / "results.txt"
    out.write_text("keep me\n")
    for given in (out, f"{out}/", out / "sub"):  # the file itself, or a folder below it
        r = compare(config, given, *mode)
        assert_one_line_error(r, "is a file, not a directory")
        assert out.read_text() == "keep me\n"
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert_one_line_error(compare(config, tmp_path / "dangling", *mode), "is a symbolic link to nothing")
    assert_one_line_error(compare(config, tmp_path / "dangling" / "sub", *mode),
                          f"{tmp_path / 'dangling'} is a symbolic link to nothing")
    assert not (tmp_path / "nowhere").exists()
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    for given in (tmp_path / "loop", tmp_path / "loop" / "sub"):
        assert_one_line_error(compare(config, given, *mode), "too many levels of symbolic links")
        r = octet("train", "--config", config, *sets(*TINY), "--out", given)
        assert_one_line_error(r, "too many levels of symbolic links")


def test_compare_resume_keeps_finished_arms(config, tmp_path):
    out = tmp_path / "cmp"
    assert compare(config, out, arms="bf16").returncode == 0
    bf16 = snapshot(out / "bf16")
    r = compare(config, out, "--resume")
    assert r.returncode == 0, r.stderr
    assert "arm bf16 is complete (kept)" in r.stdout
    assert snapshot(out / "bf16") == bf16, "a finished arm is kept byte for byte"
    summary = json.loads((out / "summary.json").read_text())
    assert [s["arm"] for s in summary] == ["bf16", "fp8-matched"]
    # Extending every arm with a schedule key resumes each from its checkpoint.
    r = compare(config, out, "--resume", *sets("train.steps=3"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("resume: train.steps 2 -> 3 from step 2") == 2


def test_compare_overwrite_keeps_nothing_stale(config, tmp_path):
    out = tmp_path / "cmp"
    assert compare(config, out, arms="bf16,fp8-stale").returncode == 0
    r = compare(config, out, "--overwrite", arms="bf16")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["bf16", "curves.png", "summary.json"]
    assert [s["arm"] for s in json.loads((out / "summary.json").read_text())] == ["bf16"]


def test_compare_overwrite_refuses_an_arm_another_process_trains(config, tmp_path):
    import subprocess
    import time
    from cli_util import OCTET
    out = tmp_path / "cmp"
    long_run = subprocess.Popen([OCTET, "compare", "--config", config, *sets(*TINY, "train.steps=10000000"),
                                 "--arms", "bf16", "--out", out], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (out / "bf16" / "metrics.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.1)  # the arm's directory is locked before its first step
        assert long_run.poll() is None, long_run.stderr.read()
        r = compare(config, out, "--overwrite", arms="bf16")
        assert_one_line_error(r, f"run directory {out / 'bf16'} is in use by another octet process")
        assert (out / "bf16" / "metrics.jsonl").exists() and long_run.poll() is None
    finally:
        long_run.kill()
        long_run.communicate()


def test_compare_prints_the_settings_once_then_what_differs(config, tmp_path):
    r = compare(config, tmp_path / "cmp")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("| model.n_layer |") == 1
    assert "| precision.arm | bf16, fp8-matched (one run each) |" in r.stdout
    assert r.stdout.count("| precision.arm | fp8-matched |") == 1
    assert r.stdout.count("| parameter | value | meaning |") == 3  # once, then once per arm
    # The max row residual is a check only with the matched delta (docs/training.md §Output).
    rows = {line.split("|")[1].strip(): line for line in r.stdout.splitlines() if line.startswith("| bf16 |")
            or line.startswith("| fp8-matched |")}
    assert "| n/a |" in rows["bf16"] and "| n/a |" not in rows["fp8-matched"]


def test_plot_out_must_name_a_png(config, tmp_path):
    out = tmp_path / "cmp"
    assert compare(config, out, arms="bf16").returncode == 0
    r = octet("plot", out / "bf16", "--out", tmp_path / "curves.svg")
    assert_one_line_error(r, "the plot is a PNG", "ending in .png")
    assert not (tmp_path / "curves.svg").exists()
    assert_one_line_error(octet("plot", out / "bf16", "--out", tmp_path / ".png"), "ending in .png")
    assert_one_line_error(octet("plot", out / "bf16", "--out", tmp_path / "no" / "x.png"), "does not exist")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    assert_one_line_error(octet("plot", out / "bf16", "--out", tmp_path / "loop" / "x.png"),
                          "too many levels of symbolic links")
    assert_one_line_error(octet("plot", out / "bf16", "--out", tmp_path / "c.txt" / "x.png"),
                          "is a file, not a directory")
    assert_one_line_error(octet("eval", "--run", tmp_path / "loop"), "Too many levels of symbolic links")


def test_plot_says_when_it_skips_lines_of_the_metrics(config, tmp_path):
    out = tmp_path / "cmp"
    assert compare(config, out, arms="bf16").returncode == 0
    metrics = out / "bf16" / "metrics.jsonl"
    lines = metrics.read_text().splitlines()
    metrics.write_text("\n".join(lines) + '\n\n\n{"step": 3, "loss"')  # blank lines; a last line cut short
    r = octet("plot", out / "bf16", "--out", tmp_path / "a.png")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    metrics.write_text("\n".join([lines[0], "garbage", '{"loss": 1.0}', *lines[1:]]) + "\n")
    r = octet("plot", out / "bf16", "--out", tmp_path / "b.png")
    assert r.returncode == 0, r.stderr
    assert r.stderr == f"octet: warning: {metrics}: skipped 2 unreadable line(s), the first at line 2\n"
    assert (tmp_path / "b.png").stat().st_size > 0


def test_plot_replaces_its_png_and_never_writes_through_a_link(config, tmp_path):
    """`plot RUN` redraws RUN/loss.png by rename: a symbolic link there is replaced, not written
    through; a directory there is refused before gnuplot runs."""
    out = tmp_path / "cmp"
    assert compare(config, out, arms="bf16").returncode == 0
    precious = tmp_path / "precious.txt"
    precious.write_text("mine\n")
    png = out / "bf16" / "loss.png"
    if png.exists():
        png.unlink()
    png.symlink_to(precious)
    r = octet("plot", out / "bf16")
    assert r.returncode == 0, r.stderr
    assert precious.read_text() == "mine\n"
    assert not png.is_symlink() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (out / "bf16" / "loss.png.tmp").exists()
    (out / "bf16" / "loss.png.tmp").symlink_to(precious)  # nor through one at the temporary name
    r = octet("plot", out / "bf16")
    assert r.returncode == 0, r.stderr
    assert precious.read_text() == "mine\n" and not png.is_symlink()
    assert not os.path.lexists(out / "bf16" / "loss.png.tmp")
    png.unlink()
    png.mkdir()
    assert_one_line_error(octet("plot", out / "bf16"), "is a directory")
    assert png.is_dir()


def test_compare_without_gnuplot_keeps_the_results(config, tmp_path):
    env = dict(os.environ, PATH=str(tmp_path / "no-bin"))
    out = tmp_path / "cmp"
    r = octet_in(tmp_path, "compare", "--config", config, *sets(*TINY), "--arms", "bf16", "--out", out, env=env)
    assert r.returncode == 0, r.stderr
    assert "warning" in r.stderr and "gnuplot" in r.stderr
    assert (out / "summary.json").exists() and not (out / "curves.png").exists()
    r = octet_in(tmp_path, "plot", out / "bf16", "--out", tmp_path / "x.png", env=env)
    assert_one_line_error(r, "gnuplot")


@pytest.mark.parametrize("title", ["Bob's run", 'say "hi" $(touch pwned) `id` \\ ; a_b^2', "two\nlines"])
def test_plot_any_title(config, tmp_path, title):
    out = tmp_path / "cmp"
    assert compare(config, out, arms="bf16").returncode == 0
    png = tmp_path / "it's here.png"
    r = octet_in(tmp_path, "plot", out / "bf16", "--title", title, "--out", png)
    assert r.returncode == 0, r.stderr
    assert png.stat().st_size > 1000
    assert not (tmp_path / "pwned").exists()


def test_compare_seeds_gives_mean_std_and_a_noise_test(config, tmp_path):
    # docs/training.md §"Several seeds": every arm once per seed in <arm>/seed-<seed>, the same
    # data order per seed across arms, mean ± std and Welch's t-test of each gap to bf16.
    out = tmp_path / "cmp"
    r = compare(config, out, "--seeds", "2")
    assert r.returncode == 0, r.stderr
    for arm in ("bf16", "fp8-matched"):
        for seed in (1234, 1235):
            assert (out / arm / f"seed-{seed}" / "metrics.jsonl").is_file()
    summary = json.loads((out / "summary.json").read_text())
    assert [s["arm"] for s in summary] == ["bf16", "fp8-matched"]
    for s in summary:
        assert s["seeds"] == [1234, 1235] and len(s["val_losses"]) == 2
        mean = sum(s["val_losses"]) / 2
        assert abs(s["val_loss"] - mean) < 1e-9
        assert abs(s["val_loss_std"] - abs(s["val_losses"][0] - s["val_losses"][1]) / 2 ** 0.5) < 1e-9
    assert summary[0]["test"] is None
    test = summary[1]["test"]
    assert test["name"].startswith("Welch") and 0 <= test["p"] <= 1
    assert test["vs_bf16"] == ("outside noise" if test["p"] < 0.05 else "inside noise")
    assert "over 2 seeds" in r.stdout and test["vs_bf16"] in r.stdout
    # Seeds differ in init and data order: the two bf16 runs are different runs.
    assert summary[0]["val_losses"][0] != summary[0]["val_losses"][1]
    # The same seed gives each arm the same data: the first step's loss of bf16 and fp8-matched
    # differ only by the arm's rounding (they start from the same init on the same batch).
    first = [json.loads((out / a / "seed-1235" / "metrics.jsonl").read_text().splitlines()[0])
             for a in ("bf16", "fp8-matched")]
    assert abs(first[0]["loss"] - first[1]["loss"]) < 0.05
    # A resume must keep the layout.
    r = compare(config, out, "--resume")
    assert_one_line_error(r, "--seeds > 1", "same --seeds")
    r = compare(config, out, "--seeds", "0")
    assert_one_line_error(r, "--seeds must be in [1, 1000]")


def test_compare_resume_refuses_seeds_it_does_not_include(config, tmp_path):
    # A larger --seeds adds seeds; a smaller one would leave finished seeds out of the table.
    out = tmp_path / "cmp"
    assert compare(config, out, "--seeds", "3", arms="bf16").returncode == 0
    before = snapshot(out)
    r = compare(config, out, "--seeds", "2", "--resume", arms="bf16")
    assert_one_line_error(r, "seed-1236", "does not include")
    assert snapshot(out) == before
    r = compare(config, out, "--seeds", "4", "--resume", arms="bf16")
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "summary.json").read_text())[0]["seeds"] == [1234, 1235, 1236, 1237]
