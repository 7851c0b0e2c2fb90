"""The machine code of the Hopper attention kernels, read without a GPU: `cuobjdump` (NVIDIA's
nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels, which ./dev installs) on the CUDA build's
`octet` binary (build/cuda, or OCTET_CUDA_BUILD). Skipped when there is no CUDA build (no nvcc).

- Registers (`cuobjdump -res-usage`): the flash backward kernels without residual sums
  (src/cuda/attention/flash/flash_bwd_sm90.cu wgmma_backward_kernel) with dQ by atomics, every
  overlap kernel, the default at head_dim 64 (dQ by TMA and the Sᵀ/dPᵀ overlap), the
  matched-delta pre-pass (flash_bwd_delta_sm90.cu) and the forward spill nothing (STACK 0): a spill there is a slowdown, and
  in the overlap kernels it could fall between a wgmma's issue and its wait. The default at
  head_dim 128 (dQ by TMA) spills at most 32 bytes a thread, and no spill store or load names an
  accumulator register of a wgmma between its issue and its wait. The overlap exists at head_dim 64 only; the pre-pass fits
  two CTAs an SM (<= 128 registers).
- The warp-specialized 64 x 64 kernel (flash_bwd_ws_sm90.cu ws_backward_kernel): 384 threads at
  168 registers (its setmaxnreg split), the spill bounds of test_the_warp_specialized_backward, no
  spill of an in-flight accumulator, dQ by TMA bulk reduces only (four `UTMAREDG`; eight in the
  head_dim 64 overlap kernels, which issue a step's four at two places: the next step's start and
  after the last step).
- The dQ path (BackwardParams::dq_tma): the atomics' kernels add dQ by 16-byte FP32 reductions
  (`REDG.E.ADD.F32x4`, head_dim / 8 a thread per step) and issue no TMA reduce; the TMA kernels have
  none of those and four `UTMAREDG` (a step's four boxes).
- The overlap (BackwardParams::sdp_overlap): in every overlap kernel each `WARPGROUP.DEPBAR.LE
  gsb0, 0x1` (the wait for Sᵀ with dPᵀ still in flight) is followed by >= 100 instructions before
  the wait for dPᵀ (`DEPBAR.LE gsb0, 0x0`), and none of them reads or writes dPᵀ's 32 accumulator
  registers (the second group's QGMMA destination and the 31 after it).
"""
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("OCTET_CUDA_BUILD", ROOT / "build" / "cuda"))
OCTET = BUILD / "octet"
BACKWARD = re.compile(r"wgmma_backward_kernelILi(\d+)ELb([01])ELb([01])ELb([01])ELb([01])ELb([01])ELb([01])E")
WS_BACKWARD = re.compile(r"ws_backward_kernelILi(\d+)ELb([01])ELb([01])ELb([01])ELb([01])ELb([01])E")


def tool(name):
    """cuobjdump / nvdisasm: from the venv's NVIDIA wheel, else PATH."""
    for base in map(pathlib.Path, sys.path):
        p = base / "nvidia" / "cu13" / "bin" / name
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    return shutil.which(name)


CUOBJDUMP = tool("cuobjdump")
pytestmark = [
    pytest.mark.skipif(not OCTET.is_file(), reason=f"no CUDA build at {BUILD} (./dev test builds one when nvcc is found)"),
    pytest.mark.skipif(CUOBJDUMP is None or tool("nvdisasm") is None,
                       reason="no cuobjdump/nvdisasm (./dev installs nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm)"),
]


def cuobjdump(*args):
    env = dict(os.environ, PATH=str(pathlib.Path(CUOBJDUMP).parent) + os.pathsep + os.environ.get("PATH", ""))
    r = subprocess.run([CUOBJDUMP, *args, str(OCTET)], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def resources():
    """{mangled kernel name: {'REG': n, 'STACK': n, ...}} of the sm_90a machine code in the binary
    (another architecture's copy of a kernel, a stub that traps, is not read)."""
    out, name, arch = {}, None, None
    for line in cuobjdump("-res-usage").splitlines():
        m = re.match(r"\s*arch = (\S+)", line)
        if m:
            arch = m.group(1)
            continue
        m = re.match(r"\s*Function (\S+):", line)
        if m:
            name = m.group(1) if arch == "sm_90a" else None
            continue
        if name and "REG:" in line:
            usage = {k: int(v) for k, v in re.findall(r"(\w+):(\d+)", line)}
            assert "REG" in usage and "STACK" in usage, f"unexpected resource line: {line}"
            out[name] = usage
            name = None
    assert out, "no sm_90a machine code in the binary"
    return out


def matching_kernels(res, pattern):
    """[(name, the pattern's template arguments as ints, usage)] of the kernels whose name matches."""
    found = []
    for name, usage in res.items():
        m = pattern.search(name)
        if m:
            found.append((name, tuple(int(x) for x in m.groups()), usage))
    return found


def backward_kernels(res):
    """[(name, (D, do_e5m2, ds_e5m2, res, dq_tma, overlap, direct), usage)] of wgmma_backward_kernel."""
    return matching_kernels(res, BACKWARD)


def ws_backward_kernels(res):
    """[(name, (D, do_e5m2, ds_e5m2, res, overlap, direct), usage)] of ws_backward_kernel (the 64 x 64
    kernel, flash_bwd_ws_sm90.cu)."""
    return matching_kernels(res, WS_BACKWARD)


def test_the_warp_specialized_backward():
    # (D, do_e5m2, ds_e5m2, res, overlap, direct): 4 format pairs x (residual x overlap + direct x
    # overlap) at 64, 4 x residual at 128. Launched with 384 threads at 168 registers (the setmaxnreg
    # split 24 / 240); no spill at 128 without residual sums (the default), at most 32 bytes with them
    # and 8 at 64 (none of it in a wgmma's flight); dQ by the four bulk reduces of a step, no atomics.
    ws = ws_backward_kernels(resources())
    assert len([k for k in ws if k[1][0] == 64]) == 24 and len([k for k in ws if k[1][0] == 128]) == 8, \
        [k[1] for k in ws]
    assert all(k[1][0] == 64 for k in ws if k[1][4] or k[1][5]), "an overlap or direct kernel at head_dim 128"
    for name, args, usage in ws:
        assert usage["REG"] == 168, (args, usage)
        limit = 0 if args[0] == 128 and not args[3] else 32 if args[0] == 128 else 8
        assert usage["STACK"] <= limit, (args, usage)
        if args[1] and args[2]:  # one format pair: the code paths are the same in the others
            ins = instructions(cuobjdump("-sass", "-fun", name))
            ops = [op for op, _ in ins]
            assert spills_in_flight(ins) == [], (args, spills_in_flight(ins))
            # a step's four; the overlap kernels issue them at the next step's start and after the
            # last step (two sites in the code)
            assert sum(op.startswith("UTMAREDG") for op in ops) == (8 if args[4] else 4), args
            assert not any(op.startswith("REDG.E.ADD.F32x4") for op in ops), args


def spills_in_flight(ins):
    """[spill stores and loads (STL / LDL) that, in listing order, name a register of a QGMMA's
    accumulator between the QGMMA's issue and the next `WARPGROUP.DEPBAR.LE gsb0, 0x0`] (a spill
    of an in-flight accumulator would make ptxas wait for the product there)."""
    found, acc = [], set()
    for op, text in ins:
        m = re.match(r"QGMMA\.64x(\d+)x", op)
        if m:
            base = int(re.match(r"\s*R(\d+)", text).group(1))
            acc |= set(range(base, base + int(m.group(1)) // 2))
        elif op.startswith("WARPGROUP.DEPBAR") and text.replace(" ", "").endswith("0x0"):
            acc = set()
        elif (op.startswith("STL") or op.startswith("LDL")) and registers(op, text) & acc:
            found.append(f"{op} {text.strip()}")
    return found


def test_the_spill_check_sees_a_spill_in_flight():
    sass = """
        /*0010*/                   STL [R1], R30 ;
        /*0020*/                   QGMMA.64x64x32.F32.E4M3.E4M3 R24, gdesc[UR4], RZ, !UPT ;
        /*0030*/                   LDL R2, [R1+0x4] ;
        /*0040*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0050*/                   LDL R30, [R1] ;
    """
    assert spills_in_flight(instructions(sass)) == []
    for bad in ("LDL R55, [R1+0x4]", "STL [R1+0x4], R24", "STL.64 [R1+0x4], R23"):
        assert spills_in_flight(instructions(sass.replace("LDL R2, [R1+0x4]", bad))) == [bad]


def test_the_attention_kernels_do_not_spill():
    res = resources()
    bwd = backward_kernels(res)
    # (D, do_e5m2, ds_e5m2, res, dq_tma, overlap, direct): the defaults take dQ by TMA, and the
    # overlap at 64; the direct dK/dV epilogue (OCTET_FLASH_BWD_DKV_DIRECT) exists for the head_dim
    # 64 TMA kernels without residual sums, and spills nothing either
    def tma_kernel(k, direct):
        return k[1][3:] == (0, 1, int(k[1][0] == 64), direct)
    defaults = [k for k in bwd if tma_kernel(k, 0)]
    direct = [k for k in bwd if k[1][6] == 1]  # both product orders
    atomics = [k for k in bwd if k[1][3:] == (0, 0, 0, 0)]
    overlap = [k for k in bwd if k[1][5] == 1]
    assert len(defaults) == 8, f"{len(defaults)} default backward kernels (2 head_dims x 4 format pairs expected)"
    assert len(direct) == 8, f"{len(direct)} direct-epilogue kernels (4 format pairs x 2 product orders at 64)"
    assert all(k[1][0] == 64 and k[1][4] == 1 and k[1][3] == 0 for k in bwd if k[1][6]), \
        "a direct epilogue off head_dim 64 or the TMA dQ"
    assert len(atomics) == 8, f"{len(atomics)} atomics' backward kernels (2 head_dims x 4 format pairs expected)"
    assert all(k[1][0] == 64 for k in overlap), "an overlap kernel at head_dim 128"
    assert len(overlap) == 20, f"{len(overlap)} overlap kernels (4 format pairs x (residual x dQ path + direct))"
    for name, args, usage in atomics + overlap + direct + [k for k in defaults if k[1][0] == 64]:
        assert usage["STACK"] == 0 and usage["REG"] <= 255, (args, usage)
    for name, args, usage in [k for k in defaults if k[1][0] == 128]:
        assert usage["STACK"] <= 32 and usage["REG"] <= 255, (args, usage)
        ins = instructions(cuobjdump("-sass", "-fun", name))
        assert any(op.startswith("QGMMA") for op, _ in ins), f"{args}: no SASS read for {name}"
        assert spills_in_flight(ins) == [], (args, spills_in_flight(ins))
    delta_rows = [u for n, u in res.items() if "delta_rows_kernel" in n]  # flash_bwd_delta_sm90.cu
    forward = [u for n, u in res.items() if "tma_forward_kernel" in n]
    assert len(delta_rows) == 4 and forward
    for usage in delta_rows:
        assert usage["STACK"] == 0 and usage["REG"] <= 128, usage  # two CTAs an SM
    for usage in forward:
        assert usage["STACK"] == 0, usage


def test_the_dq_path_is_the_one_asked_for():
    # the atomics' 16-byte FP32 adds (16 a thread per step at head_dim 128, 8 at 64) in the atomics'
    # kernels; in the TMA kernels none, and the four bulk reduces of one step instead
    for name, args, _ in backward_kernels(resources()):
        if args[2] or args[3]:
            continue  # one dS format and no residual sums: the dQ path is the same in the others
        ops = [op for op, _ in instructions(cuobjdump("-sass", "-fun", name))]
        vector_adds = sum(op.startswith("REDG.E.ADD.F32x4") for op in ops)
        reduces = sum(op.startswith("UTMAREDG") for op in ops)
        if args[4]:
            assert (vector_adds, reduces) == (0, 4), (args, vector_adds, reduces)
        else:
            assert (vector_adds, reduces) == (args[0] // 8, 0), (args, vector_adds, reduces)


def registers(opcode, operands):
    """The register numbers an instruction names: its data registers R<n> as wide as the opcode's
    data (.128: 4, .64 or a 64-bit op (.WIDE, D*): 2, else 1; conservative: every data register
    takes that width), address registers in [...] 2 wide with .64 else 1; IMAD.WIDE's by position
    (its destination and addend 64-bit, its factors 32-bit)."""
    wide = 4 if ".128" in opcode else 2 if (".64" in opcode or ".WIDE" in opcode or opcode[:4] in
                                             ("DADD", "DFMA", "DMUL", "DSET", "DMNM")) else 1
    regs = set()
    if opcode.startswith("IMAD.WIDE"):  # d (64-bit) = a (32) * b (32) + c (64)
        for i, op in enumerate(o.strip() for o in operands.split(",")):
            n = re.fullmatch(r"-?R(\d+)", op)
            if n:
                regs.update(range(int(n.group(1)), int(n.group(1)) + (2 if i in (0, 3) else 1)))
        return regs
    for addr in re.findall(r"\[([^\]]*)\]", operands):
        for n, suffix in re.findall(r"\bR(\d+)(\.64)?", addr):
            regs.update(range(int(n), int(n) + (2 if suffix else 1)))
    for n in re.findall(r"\bR(\d+)\b", re.sub(r"\[[^\]]*\]", "", operands)):
        regs.update(range(int(n), int(n) + wide))
    return regs


def instructions(sass):
    """[(opcode with modifiers, operand text)] of a SASS listing."""
    out = []
    for line in sass.splitlines():
        m = re.search(r"/\*[0-9a-f]{4,6}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][^\s;]*)\s*([^;]*);", line)
        if m:
            out.append((m.group(1), m.group(2)))
    return out


def untouched_until_wait(ins, m, held, what):
    """The index of the first `DEPBAR.LE gsb0, 0x0` from ins[m] on; raises AssertionError ("<op>
    <operands> touches R<n> <what>") at the first instruction before it, other than a QGMMA, that
    names a register of `held`."""
    while not (ins[m][0].startswith("WARPGROUP.DEPBAR") and ins[m][1].replace(" ", "").endswith("0x0")):
        if not ins[m][0].startswith("QGMMA"):
            touched = registers(*ins[m]) & held
            assert not touched, f"{ins[m][0]} {ins[m][1]} touches R{min(touched)} {what}"
        m += 1
    return m


def overlap_windows(ins):
    """[instructions between the two waits] of each `DEPBAR.LE gsb0, 0x1` in `ins`; raises
    AssertionError naming the first instruction that touches the in-flight group's 32 accumulator
    registers before its wait."""
    windows = []
    for k, (op, text) in enumerate(ins):
        if not (op.startswith("WARPGROUP.DEPBAR") and text.replace(" ", "").endswith("0x1")):
            continue
        j = k - 1  # the last QGMMA before the wait: the in-flight group's (dPᵀ's)
        while not ins[j][0].startswith("QGMMA"):
            j -= 1
        base = int(re.match(r"\s*R(\d+)", ins[j][1]).group(1))
        acc = set(range(base, base + 32))
        m = untouched_until_wait(ins, k + 1, acc, "before its wait")
        windows.append(m - k - 1)
    return windows


def test_the_window_check_sees_a_touch():
    # two groups (S into R24.., dP into R56..), the wait for S, P's work, the wait for dP
    sass = """
        /*0010*/                   QGMMA.64x64x32.F32.E4M3.E4M3 R24, gdesc[UR4], RZ, !UPT ;
        /*0020*/                   QGMMA.64x64x32.F32.E4M3.E4M3 R56, gdesc[UR8], RZ, !UPT ;
        /*0030*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0040*/                   MUFU.EX2 R2, R24 ;
        /*0050*/                   LDS.64 R54, [R3] ;
        /*0060*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0070*/                   FMUL R57, R57, R2 ;
    """
    assert overlap_windows(instructions(sass)) == [2]
    for bad in ("FMUL R80, R2, R2", "LDS.128 R54, [R3]", "@P0 STS [R4], R87", "IMAD.WIDE R55, R2, R3, R4",
                "LDG.E [R56.64], R2"):
        with pytest.raises(AssertionError, match="before its wait"):
            overlap_windows(instructions(sass.replace("MUFU.EX2 R2, R24", bad)))


def test_the_overlap_keeps_dp_in_flight_while_p_is_formed():
    kernels = [k for k in backward_kernels(resources()) if k[1][5] == 1]
    assert kernels
    for name, args, _ in kernels:
        ins = instructions(cuobjdump("-sass", "-fun", name))
        assert any(op.startswith("QGMMA") for op, _ in ins), f"{args}: no SASS read for {name}"
        try:
            windows = overlap_windows(ins)
        except AssertionError as e:
            raise AssertionError(f"{args}: {e}") from None
        assert len(windows) >= 2, f"{args}: {len(windows)} overlap windows (one per query half expected)"
        assert min(windows) >= 100, f"{args}: only {min(windows)} instructions between the two waits"


def dv_in_flight(ins):
    """The instructions between the 64 x 64 overlap kernel's dV product (the first QGMMAs after the
    wait for dPᵀ: the `DEPBAR.LE gsb0, 0x0` that follows the first `DEPBAR.LE gsb0, 0x1`, Sᵀ's) and
    the next `DEPBAR.LE gsb0, 0x0`; raises AssertionError if there is no such product or an
    instruction other than a QGMMA touches its accumulator (32 registers) or A fragments before
    that wait."""
    waits = [k for k, (op, text) in enumerate(ins) if op.startswith("WARPGROUP.DEPBAR")]
    first = next(i for i, k in enumerate(waits) if ins[k][1].replace(" ", "").endswith("0x1"))
    k1, k2 = waits[first + 1], waits[first + 2]
    assert ins[k1][1].replace(" ", "").endswith("0x0"), "the wait after Sᵀ's is not dPᵀ's (0x0)"
    g = [k for k in range(k1, k2) if ins[k][0].startswith("QGMMA")]
    assert g and re.match(r"\s*R\d+,\s*R\d+", ins[g[0]][1]), "no register-A product after dPᵀ's wait"
    dv = [g[0]]  # its k-steps: the QGMMAs that follow with the same accumulator
    acc = re.match(r"\s*R(\d+)", ins[g[0]][1]).group(1)
    dv += [k for k in g[1:] if re.match(r"\s*R(\d+)", ins[k][1]).group(1) == acc and k - dv[-1] <= 2]
    held = set()
    for k in dv:  # QGMMA Racc, Ra, gdesc[...]: the accumulator and the register A operand
        acc_n, a = (int(n) for n in re.findall(r"\bR(\d+)", ins[k][1])[:2])
        held |= set(range(acc_n, acc_n + 32)) | set(range(a, a + 4))
    return untouched_until_wait(ins, dv[-1] + 1, held, "with dV in flight") - dv[-1] - 1


def test_the_64x64_overlap_keeps_dv_in_flight():
    # The head_dim 64 overlap kernels issue dV's product after the wait for dPᵀ and wait for it with
    # dK's and dQ's: the amax barrier and dŜ's fragments and stores run under it.
    kernels = [k for k in ws_backward_kernels(resources()) if k[1][4] and k[1][1] and k[1][2]]
    assert len(kernels) == 3, [k[1] for k in kernels]  # with / without residual sums, direct
    for name, args, _ in kernels:
        try:
            window = dv_in_flight(instructions(cuobjdump("-sass", "-fun", name)))
        except (AssertionError, StopIteration) as e:
            raise AssertionError(f"{args}: {e}") from None
        assert window >= 100, f"{args}: only {window} instructions under dV's product"


def test_the_dv_check_sees_a_touch():
    sass = """
        /*0010*/                   QGMMA.64x64x32.F32.E4M3.E4M3 R56, gdesc[UR16], RZ, !UPT ;
        /*0020*/                   QGMMA.64x64x32.F32.E4M3.E5M2 R24, gdesc[UR24], RZ, !UPT ;
        /*0030*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0040*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0050*/                   QGMMA.64x64x32.F32.E4M3.E5M2 R88, R120, gdesc[UR16], RZ, !UPT ;
        /*0060*/                   QGMMA.64x64x32.F32.E4M3.E5M2 R88, R124, gdesc[UR16], R88, gsb0 ;
        /*0070*/                   FMUL R2, R24, R3 ;
        /*0080*/                   QGMMA.64x64x32.F32.E5M2.E4M3 R56, R140, gdesc[UR16], RZ, !UPT ;
        /*0090*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
    """
    assert dv_in_flight(instructions(sass)) == 2
    for bad in ("FMUL R2, R90, R3", "MOV R127, R2", "STS.128 [R4], R116", "IMAD.WIDE.U32 R72, R2, UR12, R88"):
        with pytest.raises(AssertionError, match="with dV in flight"):
            dv_in_flight(instructions(sass.replace("FMUL R2, R24, R3", bad)))
    with pytest.raises(AssertionError, match="no register-A product"):
        dv_in_flight(instructions(sass.replace("R88, R120, gdesc[UR16], RZ", "R88, gdesc[UR20], RZ")))
