"""NumPy emulation of the wgmma FP8 attention backward's indexing (src/cuda/flash/
flash_backward_wgmma.{cu,cuh}) on one 128-query x 128-key tile at head_dim 64, before any GPU run.

Each kernel formula is transcribed (copy_rows with the s_key permutation, copy_cols, the swizzle,
the byte scatter of dS, the to_a_frags packing, the dQ atomics' lane swap, column_sum8's shuffles,
the epilogue's stores) and run for every thread; the tensor core is modelled by the PTX ISA's
fragment layouts (§9.7.15.5: the m64nNk32 accumulator, the register A fragment) and by the
K-major swizzled descriptor read (logical byte row·W + 32·kstep + c, stored at swizzle(offset)). The
products that result must equal plain matrix products of the same integer-valued operands: a wrong
index anywhere gives a different matrix.
"""
import numpy as np

D, BM, BN, WG_KEYS = 64, 128, 128, 64
rng = np.random.default_rng(7)


def s_key(nt, n):
    return 32 * (nt // 4) + 16 * ((nt // 2) % 2) + 4 * (n // 2) + 2 * (nt % 2) + n % 2


def swizzle(off, w):
    return off ^ (((off >> 7) & (w // 16 - 1)) << 4)


def threads():
    for tid in range(256):
        yield tid, tid // 128, tid // 32 % 4, tid % 32 // 4, tid % 4


def copy_rows(src, row0, n_rows, rows, w, perm):
    """bwdw::copy_rows: tile row r <- src row row0 + (s_key(r/8, r%8) if perm else r)."""
    smem = np.full(rows * w, -1, dtype=np.int64)
    for c in range(rows * w // 16):
        r, cc = c // (w // 16), c % (w // 16)
        i = row0 + (s_key(r // 8, r % 8) if perm else r)
        for b in range(16):
            smem[swizzle(r * w + 16 * cc, w) + b] = src[i, 16 * cc + b] if i < n_rows else 0
    return smem


def copy_cols(src, col0, n_cols, rows):
    """bwdw::copy_cols: [rows][128] from columns col0.. (whole chunks past n_cols: zero)."""
    smem = np.full(rows * 128, -1, dtype=np.int64)
    for c in range(rows * 8):
        r, cc = c // 8, c % 8
        for b in range(16):
            smem[swizzle(r * 128 + 16 * cc, 128) + b] = (
                src[r, col0 + 16 * cc + b] if col0 + 16 * cc < n_cols else 0)
    return smem


def desc_read(smem, base, rows, k_bytes, w):
    """The K-major descriptor read of a [rows][k_bytes] operand starting at tile row base/w."""
    m = np.zeros((rows, k_bytes), dtype=np.int64)
    for r in range(rows):
        for k in range(k_bytes):  # k-step k // 32 at start + 32·(k // 32), byte k % 32
            m[r, k] = smem[swizzle(base + r * w + k, w)]
    assert (m >= 0).all(), "read an unwritten byte"
    return m


def acc_of(d, w, g, t):
    """The m64nN accumulator of lane (g, t) of warp w: acc[i][e] = D[16w + g + 8(e/2)][8i + 2t + e%2]."""
    n = d.shape[1]
    return [[d[16 * w + g + 8 * (e // 2), 8 * i + 2 * t + e % 2] for e in range(4)]
            for i in range(n // 8)]


def a_frags_matrix(frags):
    """The 64 x K A operand from every lane's register fragments frags[(w, g, t)][kk][r] (4 bytes:
    a0 = A[g][4t..], a1 = A[g+8][4t..], a2 = A[g][16+4t..], a3 = A[g+8][16+4t..] per warp)."""
    kk_n = len(next(iter(frags.values())))
    a = np.full((64, 32 * kk_n), -1, dtype=np.int64)
    for (w, g, t), fr in frags.items():
        for kk in range(kk_n):
            for r in range(4):
                for c in range(4):
                    a[16 * w + g + 8 * (r % 2), 32 * kk + 16 * (r // 2) + 4 * t + c] = fr[kk][r][c]
    assert (a >= 0).all()
    return a


def to_a_frags(v):
    """bwd::to_a_frags on values already rounded (the codes): a[kk][r] bytes."""
    out = []
    for kk in range(len(v) // 4):
        regs = []
        for r in range(4):
            nt, ro = 4 * kk + 2 * (r // 2), r % 2
            regs.append([v[nt][2 * ro], v[nt][2 * ro + 1], v[nt + 1][2 * ro], v[nt + 1][2 * ro + 1]])
        out.append(regs)
    return out


def test_tile_products_and_scatter():
    tq_p, i0 = 256, 128  # the second query block of a 256-row head
    q = rng.integers(0, 50, (tq_p, D))
    k = rng.integers(0, 50, (BN, D))
    v = rng.integers(0, 50, (BN, D))
    dvo = rng.integers(0, 50, (tq_p, D))  # (dO/l)~ codes, rows
    s_q = copy_rows(q, i0, tq_p, BM, D, True)
    s_k = copy_rows(k, 0, BN, BN, D, False)
    s_kt = copy_cols(k.T.copy(), 0, BN, D)
    s_dvt = copy_cols(dvo.T.copy(), i0, tq_p, D)
    q_blk = q[i0:i0 + BM]
    for wg in range(2):
        a = desc_read(s_k, WG_KEYS * wg * D, 64, D, D)
        b = desc_read(s_q, 0, BM, D, D)
        st = a @ b.T  # Sᵀ as the tensor core forms it
        # tile_prob's column -> query: element (i, e) of lane (w, g, t) is key 64wg + 16w + g +
        # 8(e/2), query s_key(i, 2t + e%2).
        frags = {}
        for _, wg_, w, g, t in threads():
            if wg_ != wg:
                continue
            acc = acc_of(st, w, g, t)
            for i in range(BN // 8):
                for e in range(4):
                    key = WG_KEYS * wg + 16 * w + g + 8 * (e // 2)
                    qq = s_key(i, 2 * t + e % 2)
                    assert acc[i][e] == k[key] @ q_blk[qq]
            # P̃ (here: the S values as stand-in codes) -> A fragments over queries in natural order
            frags[(w, g, t)] = to_a_frags(acc)
        a_p = a_frags_matrix(frags)
        np.testing.assert_array_equal(a_p, (k[64 * wg:64 * wg + 64] @ q_blk.T))
        # dV's product: A = P̃ᵀ [keys][queries], B = (dO/l)~ᵀ columns [d][queries]
        b_dv = desc_read(s_dvt, 0, D, BM, 128)
        np.testing.assert_array_equal(b_dv, dvo[i0:i0 + BM].T)
        # dQ's B = K̂ᵀ [d][keys]
        np.testing.assert_array_equal(desc_read(s_kt, 0, D, BN, 128), k.T)


def test_ds_scatter_and_dq_atomics():
    ds = rng.integers(0, 255, (BM, BN))  # dŜ codes [query][key]
    sds = np.full(BM * BN, -1, dtype=np.int64)
    for _, wg, w, g, t in threads():
        # the lane's dS accumulator values (S layout: keys 64wg + 16w + g (+8), query s_key(i, ...))
        acc = [[ds[s_key(i, 2 * t + e % 2), WG_KEYS * wg + 16 * w + g + 8 * (e // 2)]
                for e in range(4)] for i in range(BM // 8)]
        dsa = to_a_frags(acc)
        key = WG_KEYS * wg + 16 * w + g
        for kk in range(BM // 32):
            for r in range(4):
                for c in range(4):
                    qq = 32 * kk + 16 * (r // 2) + 4 * t + c
                    sds[swizzle(qq * BN + key + 8 * (r % 2), 128)] = dsa[kk][r][c]
    assert (sds >= 0).all(), "a dS byte was not written"
    k = rng.integers(0, 50, (BN, D))
    dq = np.zeros((BM, D), dtype=np.int64)
    for wg in range(2):
        a = desc_read(sds, 64 * wg * BN, 64, BN, 128)
        np.testing.assert_array_equal(a, ds[64 * wg:64 * wg + 64])
        prod = a @ k
        for _, wg_, w, g, t in threads():
            if wg_ != wg:
                continue
            aq = acc_of(prod, w, g, t)
            # the float4 atomics: lanes t, t^1 swap halves (shuffle emulated from the partner)
            odd = t % 2 == 1
            partner = acc_of(prod, w, g, t ^ 1)
            qrow = 64 * wg + 16 * w + g + (8 if odd else 0)
            for dn in range(D // 8):
                a0, a1, a2, a3 = aq[dn]
                p0, p1, p2, p3 = partner[dn]
                # the partner (odd iff we are even) sends odd_partner ? (a0, a1) : (a2, a3)
                y0, y1 = (p0, p1) if not odd else (p2, p3)
                vals = (y0, y1, a2, a3) if odd else (a0, a1, y0, y1)
                col = 8 * dn + 4 * (t // 2)
                dq[qrow, col:col + 4] += np.array(vals)
    np.testing.assert_array_equal(dq, ds @ k)


def test_column_sum8_and_epilogue():
    # Per lane (g, t) of a warp: v[u] partials of columns u of group kk; column_sum8's shuffles.
    vals = rng.integers(0, 1000, (32, 8)).astype(np.float64)  # lane, u
    g_of = [lane // 4 for lane in range(32)]

    def shfl(arr, o):
        return [arr[lane ^ o] for lane in range(32)]

    w_ = []
    for k_ in range(4):
        keep = [vals[l][k_ + 4] if g_of[l] & 4 else vals[l][k_] for l in range(32)]
        send = [vals[l][k_] if g_of[l] & 4 else vals[l][k_ + 4] for l in range(32)]
        w_.append([a + b for a, b in zip(keep, shfl(send, 16))])
    x_ = []
    for k_ in range(2):
        keep = [w_[k_ + 2][l] if g_of[l] & 2 else w_[k_][l] for l in range(32)]
        send = [w_[k_][l] if g_of[l] & 2 else w_[k_ + 2][l] for l in range(32)]
        x_.append([a + b for a, b in zip(keep, shfl(send, 8))])
    keep = [x_[1][l] if g_of[l] & 1 else x_[0][l] for l in range(32)]
    send = [x_[0][l] if g_of[l] & 1 else x_[1][l] for l in range(32)]
    res = [a + b for a, b in zip(keep, shfl(send, 4))]
    for lane in range(32):
        g, t = lane // 4, lane % 4
        want = sum(vals[l][g] for l in range(32) if l % 4 == t)  # column u = g over the 8 lanes
        assert res[lane] == want
        # column u = g of group kk is n-tile 4kk + g/2, column 2t + g%2: the query the kernel names
        for kk in range(4):
            nt, c = 4 * kk + g // 2, g % 2
            assert s_key(nt, 2 * t + c) == s_key(4 * kk + g // 2, 2 * t + g % 2)
    # Every query of a 128 block is covered exactly once per warp by (kk, g, t).
    qs = sorted(s_key(4 * kk + g // 2, 2 * t + g % 2) for kk in range(4) for g in range(8)
                for t in range(4))
    assert qs == list(range(128))
    # Epilogue: lane (wg, w, g, t) stores keys 64wg + 16w + g (+8), columns 8dn + 2t (+1): all once.
    seen = np.zeros((BN, D), dtype=int)
    for _, wg, w, g, t in threads():
        for r in range(2):
            for dn in range(D // 8):
                for c in range(2):
                    seen[WG_KEYS * wg + 16 * w + g + 8 * r, 8 * dn + 2 * t + c] += 1
    assert (seen == 1).all()
