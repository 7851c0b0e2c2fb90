#!/usr/bin/env python3
"""tools/fit_exp2_poly.py — the coefficients of src/cuda/attention/flash/flash_exp2.h.

Fits p(f) = 1 + a1 f + a2 f^2 + ... + an f^n to 2^f on [0, 1), minimizing the largest relative
error |p(f) / 2^f − 1| (minimax, by Lawson's iteratively reweighted least squares on a dense grid;
the constant term is held at 1 so that p(0) = 1 and every integer x gives 2^x exactly). Prints the
coefficients rounded to FP32 and the largest relative error of the FP32 Horner evaluation with
fused multiply-adds (what the kernel computes), over 2^20 points of [0, 1).
Usage: tools/fit_exp2_poly.py [--degree 4]   (needs numpy)
"""
import argparse

import numpy as np


def fit(degree, points=20001, iterations=3000):
    f = np.linspace(0.0, 1.0, points)
    target = np.exp2(f)
    # p(f)/2^f − 1 = Σ a_k f^k / 2^f − (1 − 1/2^f): linear in a
    a_mat = np.stack([f**k / target for k in range(1, degree + 1)], axis=1)
    b = 1.0 - 1.0 / target
    weights = np.full(points, 1.0 / points)
    for _ in range(iterations):
        root = np.sqrt(weights)
        coef, *_ = np.linalg.lstsq(a_mat * root[:, None], b * root, rcond=None)
        err = np.abs(a_mat @ coef - b)
        weights = weights * err
        weights /= weights.sum()
    return coef.astype(np.float32)


def horner_f32(coef, f):
    """1 + a1 f + ... in FP32 with one rounding per step (an FMA: exact product, one rounding)."""
    p = np.full(f.shape, coef[-1], dtype=np.float32)
    for a in coef[-2::-1]:
        p = (p.astype(np.float64) * f + np.float64(a)).astype(np.float32)
    return (p.astype(np.float64) * f + 1.0).astype(np.float32)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--degree", type=int, default=4)
    args = ap.parse_args()
    coef = fit(args.degree)
    f = (np.arange(1 << 20, dtype=np.float64) / (1 << 20)).astype(np.float32)
    p = horner_f32(coef, f.astype(np.float64))
    err = np.abs(p.astype(np.float64) / np.exp2(f.astype(np.float64)) - 1.0).max()
    for k, a in enumerate(coef, start=1):
        print(f"a{k} = {float(a)!r}f")
    print(f"max relative error (FP32 Horner, FMA): {err:.3e}")


if __name__ == "__main__":
    main()
