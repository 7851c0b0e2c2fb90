"""`octet cast` and `octet quantize` from the outside: JSON keys, the values they must report, and
bad arguments (one line on stderr naming the problem, exit code 2)."""
import json

import pytest

from cli_util import assert_bad_input, octet

RECIPES = ["tensor-delayed", "tensor-current", "row", "block", "mx", "unit"]
QUANT_KEYS = {"amax", "scale_min", "scale_max", "rel_err", "underflow_frac", "saturated_frac"}


def json_lines(r):
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


def test_cast_json_keys_one_object_per_value():
    rows = json_lines(octet("cast", "--format", "e4m3", "--json", "1", "-2.5", "nan", "inf", "-inf", "1e-3"))
    assert len(rows) == 6
    for row in rows:
        assert set(row) == {"input", "code", "value"}
        assert row["code"].startswith("0x") and len(row["code"]) == 4
    assert [r["input"] for r in rows] == ["1", "-2.5", "nan", "inf", "-inf", "1e-3"]


@pytest.mark.parametrize("args,words", [
    (["cast", "--format", "e6m1", "1"], ["unknown format 'e6m1'"]),
    (["cast", "--format", "e4m3", "abc"], ["malformed number 'abc'"]),
    (["cast", "--format", "e4m3", "1.5x"], ["malformed number '1.5x'"]),
    (["cast", "--format", "e4m3"], ["no values"]),
    (["cast", "--decode", "0x100"], ["malformed code '0x100'"]),
    (["quantize", "--recipe", "fancy", "--shape", "4x4"], ["unknown recipe 'fancy'"]),
    (["quantize", "--recipe", "row", "--format", "e3m4", "--shape", "4x4"], ["unknown format 'e3m4'"]),
    (["quantize", "--recipe", "row", "--shape", "0x4"], ["empty shape '0x4'"]),
    (["quantize", "--recipe", "row", "--shape", "4x0"], ["empty shape '4x0'"]),
    (["quantize", "--recipe", "row", "--shape", "abc"], ["malformed shape 'abc'"]),
    (["quantize", "--recipe", "row", "--shape", "4x4", "--dist", "cauchy"], ["unknown dist 'cauchy'"]),
    (["quantize", "--recipe", "unit", "--shape", "4x4", "--unit-scale", "0"], ["unit_scale"]),
    (["quantize", "--recipe", "row"], ["--shape"]),
])
def test_bad_arguments_exit_2_with_one_line(args, words):
    assert_bad_input(octet(*args), *words)


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("fmt", ["e4m3", "hybrid", "e5m2"])
@pytest.mark.parametrize("shape", ["1x1", "7x133", "129x257"])
def test_quantize_json_keys_and_sane_values(recipe, fmt, shape):
    (j,) = json_lines(octet("quantize", "--recipe", recipe, "--format", fmt, "--shape", shape,
                            "--dist", "normal", "--seed", 3, "--json"))
    assert QUANT_KEYS <= set(j)
    assert j["format"] == ("e5m2" if fmt == "e5m2" else "e4m3")
    assert 0 < j["scale_min"] <= j["scale_max"]
    assert 0 <= j["underflow_frac"] <= 1 and 0 <= j["saturated_frac"] <= 1
    # N(0,1) data, one FP8 rounding: E4M3 ~ 2^-4 relative at worst, E5M2 ~ 2^-3 (unit: scale 1,
    # so small values fall into the subnormals; allow more).
    limit = (0.3 if recipe == "unit" else 0.07) * (2 if fmt == "e5m2" else 1)
    assert j["rel_err"] < limit, j


def test_quantize_zeros_is_exact_with_scale_one():
    for recipe in RECIPES:
        (j,) = json_lines(octet("quantize", "--recipe", recipe, "--shape", "130x257", "--dist", "zeros", "--json"))
        assert j["amax"] == 0 and j["rel_err"] == 0 and j["underflow_frac"] == 0
        assert j["scale_min"] == j["scale_max"] == 1


def test_quantize_outliers_finer_scales_help():
    errs = {}
    for recipe in ["tensor-current", "row", "block"]:
        (j,) = json_lines(octet("quantize", "--recipe", recipe, "--shape", "256x1024", "--dist", "outlier", "--json"))
        errs[recipe] = j["rel_err"]
    assert errs["block"] <= errs["row"] <= errs["tensor-current"], errs


def test_quantize_text_output():
    r = octet("quantize", "--recipe", "mx", "--shape", "4x64")
    assert r.returncode == 0, r.stderr
    assert "rel_err" in r.stdout and "scale_max" in r.stdout
