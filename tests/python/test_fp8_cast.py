"""Oracle 2 of 2 for the FP8 formats: `octet cast --json` against the ml_dtypes package
(float8_e4m3fn = OCP E4M3FN, float8_e5m2), for every code and for a sweep of float32 inputs.
ml_dtypes casts without saturation (E4M3: NaN, E5M2: inf beyond max); the saturating cast is
checked against ml_dtypes applied to the input clipped to ±max, which is what OFP8's "satfinite"
means for finite inputs and ±inf. (Oracle 1, CUDA's cuda_fp8.h, is tests/fp8/cuda_oracle_test.cpp.)"""
import json
import os
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
OCTET = os.environ.get("OCTET_BIN", str(ROOT / "build" / "octet"))
DTYPES = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
MAX = {"e4m3": 448.0, "e5m2": 57344.0}


def cast(fmt, args, *flags, chunk=2000):
    """Runs `octet cast --json` over args in chunks; returns the JSON objects, one per arg."""
    out = []
    for i in range(0, len(args), chunk):
        part = args[i:i + chunk]
        r = subprocess.run([OCTET, "cast", "--format", fmt, "--json", *flags, *part],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        rows = [json.loads(line) for line in r.stdout.splitlines()]
        assert [row["input"] for row in rows] == part
        out += rows
    return out


def as_float(v):
    return float(v) if isinstance(v, str) else v  # "nan", "inf", "-inf" parse as floats


def spec(fmt, codes):
    """ml_dtypes' value of each code, as float64."""
    return np.asarray(codes, np.uint8).view(DTYPES[fmt]).astype(np.float64)


def float_args(x):
    """float32 values as exact hex strings ('0x1.8p+3', 'nan', 'inf', '-inf')."""
    return [float(v).hex() for v in np.asarray(x, np.float32)]


def sweep(fmt):
    """float32 inputs: every FP8 value, the midpoints between neighbours and their float32
    neighbours, log-uniform magnitudes across the whole range (zero, subnormal, normal, overflow),
    random bit patterns, and the specials."""
    rng = np.random.default_rng(0)
    vals = spec(fmt, range(256))
    vals = np.sort(vals[np.isfinite(vals)])
    mids = ((vals[:-1] + vals[1:]) / 2).astype(np.float32)
    near = np.concatenate([np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf))])
    emin = -10 if fmt == "e4m3" else -18
    mags = np.exp2(rng.uniform(emin - 4, 18, 6000)).astype(np.float32) * rng.choice([-1, 1], 6000)
    bits = rng.integers(0, 2**32, 3000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 448, 449, 463.9, 464, 464.5, 465,
                        480, 57344, 61439.996, 61440, 65536, 1e-40, 3e38], np.float32)
    with np.errstate(invalid="ignore"):
        return np.concatenate([vals.astype(np.float32), mids, near, mags, bits, special])


def same_code(ours, theirs, fmt):
    """Equal codes; for NaN, both NaN (octet keeps a NaN's sign, ml_dtypes may not)."""
    a, b = spec(fmt, [ours])[0], spec(fmt, [theirs])[0]
    return (np.isnan(a) and np.isnan(b)) or ours == theirs


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_every_code_decodes_like_ml_dtypes(fmt):
    rows = cast(fmt, [f"0x{c:02x}" for c in range(256)], "--decode")
    want = spec(fmt, range(256))
    for c, (row, w) in enumerate(zip(rows, want)):
        assert int(row["code"], 16) == c
        got = as_float(row["value"])
        if np.isnan(w):
            assert np.isnan(got), (c, row)
        else:
            assert got == w and np.signbit(got) == np.signbit(w), (c, row, w)


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_every_finite_code_round_trips(fmt):
    vals = spec(fmt, range(256))
    codes = [c for c in range(256) if np.isfinite(vals[c])]
    rows = cast(fmt, float_args(vals[codes]))
    assert [int(r["code"], 16) for r in rows] == codes


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
@pytest.mark.parametrize("saturate", [True, False])
def test_sweep_encodes_like_ml_dtypes(fmt, saturate):
    x = sweep(fmt)
    flags = [] if saturate else ["--no-saturate"]
    rows = cast(fmt, float_args(x), *flags)
    ref_in = np.clip(x, -MAX[fmt], MAX[fmt]) if saturate else x  # np.clip keeps NaN
    theirs = ref_in.astype(DTYPES[fmt]).view(np.uint8)
    bad = [(float(v), r["code"], f"0x{t:02x}") for v, r, t in zip(x, rows, theirs)
           if not same_code(int(r["code"], 16), int(t), fmt)]
    assert not bad, f"{len(bad)} of {len(x)} differ, first: {bad[:5]}"
    for r, t in zip(rows, theirs):  # the decoded value is ml_dtypes' value of the code
        got, want = as_float(r["value"]), spec(fmt, [t])[0]
        assert (np.isnan(got) and np.isnan(want)) or got == want


@pytest.mark.parametrize("fmt,value,saturate,code", [
    ("e4m3", "448", True, "0x7e"), ("e4m3", "449", True, "0x7e"), ("e4m3", "463.9", True, "0x7e"),
    ("e4m3", "464", True, "0x7e"), ("e4m3", "464.5", True, "0x7e"), ("e4m3", "465", True, "0x7e"),
    ("e4m3", "1000", True, "0x7e"), ("e4m3", "inf", True, "0x7e"), ("e4m3", "-inf", True, "0xfe"),
    ("e4m3", "464", False, "0x7e"), ("e4m3", "464.5", False, "0x7f"), ("e4m3", "465", False, "0x7f"),
    ("e5m2", "57344", True, "0x7b"), ("e5m2", "61440", True, "0x7b"), ("e5m2", "61440", False, "0x7c"),
])
def test_pinned_values(fmt, value, saturate, code):
    flags = [] if saturate else ["--no-saturate"]
    (row,) = cast(fmt, [value], *flags)
    assert row["code"] == code


def test_nan_and_specials_print_as_strings():
    rows = cast("e4m3", ["nan", "-inf", "1e-3"])
    assert rows[0]["value"] == "nan" and rows[1]["value"] == -448.0
    assert rows[2]["value"] == 0.001953125  # 1e-3 rounds to the subnormal 2^-9
    assert cast("e5m2", ["-inf"], "--no-saturate")[0]["value"] == "-inf"
