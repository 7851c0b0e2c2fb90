"""tools/fit_exp2_poly.py: the coefficients src/cuda/attention/flash/flash_exp2.h holds are the ones
the script fits (to FP32 rounding: the fit's last bits may move with the BLAS), and the fit meets the
header's stated 3.0e-6 relative error bound."""
import re
import subprocess
import sys

from cli_util import ROOT

SCRIPT = ROOT / "tools" / "fit_exp2_poly.py"
HEADER = ROOT / "src" / "cuda" / "attention" / "flash" / "flash_exp2.h"


def header_coefficients():
    text = HEADER.read_text()
    return [float(re.search(rf"kA{k} = ([0-9.e+-]+)f;", text).group(1)) for k in range(1, 5)]


def test_header_holds_the_fitted_coefficients():
    out = subprocess.run([sys.executable, str(SCRIPT), "--degree", "4"], capture_output=True, text=True,
                         check=True).stdout
    fitted = [float(m) for m in re.findall(r"^a\d = ([0-9.e+-]+)f$", out, re.M)]
    assert len(fitted) == 4, out
    for got, want in zip(header_coefficients(), fitted):
        assert abs(got - want) <= 1e-6 * abs(want), (got, want)
    err = float(re.search(r"max relative error \(FP32 Horner, FMA\): ([0-9.e+-]+)", out).group(1))
    assert 1e-7 < err <= 3.0e-6, err


def test_lower_degrees_are_worse():
    # the bound is the degree's: degree 3 (FlashAttention-4's) misses it by about 30x
    out = subprocess.run([sys.executable, str(SCRIPT), "--degree", "3"], capture_output=True, text=True,
                         check=True).stdout
    err = float(re.search(r"max relative error \(FP32 Horner, FMA\): ([0-9.e+-]+)", out).group(1))
    assert err > 3.0e-5, err
