"""bench/ncu_stalls.py: the samples of a synthetic Nsight Compute source-page CSV summed by opcode
(predicates dropped, the wgmma and MUFU families kept with their second word), the shares adding to
100 %, the top instructions' leading stall reasons; a CSV without the header, or with a sample cell
that is not a number, is one clear error."""
import pathlib
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
import ncu_stalls  # noqa: E402

SCRIPT = pathlib.Path(ncu_stalls.__file__)

CSV = '''"Kernel Name","wgmma_backward_kernel"
"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","stall_barrier","stall_long_sb"
"0x10","BAR.SYNC.DEFER_BLOCKING 0x0 ;","600","590","600","0"
"0x20","@!P0 RED.E.ADD.F32x4.FTZ.RN.STRONG.GPU [R2.64], R4 ;","200","150","0","120"
"0x30","WARPGROUP.DEPBAR.LE gsb0, 0x0 ;","150","140","0","0"
"0x40","MUFU.EX2 R5, R6 ;","40","10","0","0"
"0x50","MUFU.EX2 R7, R8 ;","10","5","0","0"
"0x60","FADD R1, R2, R3 ;","0","0","0","0"
'''


def test_opcodes():
    assert ncu_stalls.opcode("@!P0 RED.E.ADD.F32x4 [R2.64], R4 ;") == "RED"
    assert ncu_stalls.opcode("WARPGROUP.DEPBAR.LE gsb0, 0x0 ;") == "WARPGROUP.DEPBAR"
    assert ncu_stalls.opcode("MUFU.EX2 R5, R6 ;") == "MUFU.EX2"
    assert ncu_stalls.opcode("BAR.SYNC.DEFER_BLOCKING 0x0 ;") == "BAR"
    assert ncu_stalls.opcode("   ") == "?"


def test_sums_by_opcode_and_top_reasons():
    rows, reasons = ncu_stalls.parse(CSV)
    assert len(rows) == 6 and reasons == ["stall_barrier", "stall_long_sb"]
    text = ncu_stalls.report(rows, top=3)
    assert "6 SASS instructions, 1000 warp-state samples" in text
    shares = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] == "%":
            shares[parts[0]] = float(parts[1])
    assert shares == {"BAR": 60.0, "RED": 20.0, "WARPGROUP.DEPBAR": 15.0, "MUFU.EX2": 5.0, "FADD": 0.0}
    top = text.split("the 3 instructions with the most samples:")[1].splitlines()[1:]
    assert len(top) == 3 and "BAR.SYNC" in top[0] and "stall_barrier 100%" in top[0]
    assert "RED.E.ADD" in top[1] and "stall_long_sb 60%" in top[1]


def test_a_cell_that_is_not_a_count_is_an_error():
    with pytest.raises(ValueError, match="'n/a' in column 'Warp Stall Sampling"):
        ncu_stalls.parse(CSV.replace('"600","590"', '"n/a","590"'))
    rows, _ = ncu_stalls.parse(CSV.replace('"600","590"', '"","590"'))  # empty: 0 samples
    assert rows[0]["samples"] == 0


def test_a_csv_without_the_header_is_one_error(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text('"Address","Source"\n"0x10","NOP ;"\n')
    r = subprocess.run([sys.executable, str(SCRIPT), str(bad)], capture_output=True, text=True)
    assert r.returncode != 0 and "Warp Stall Sampling (All Samples)" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "missing.csv")], capture_output=True, text=True)
    assert r.returncode != 0 and "missing.csv" in r.stderr and "Traceback" not in r.stderr
