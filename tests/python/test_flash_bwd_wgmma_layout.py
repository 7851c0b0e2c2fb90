"""NumPy emulation of the wgmma FP8 attention backward's indexing (src/cuda/attention/flash/
flash_bwd_sm90.cu, flash_bwd_tile_sm90.cuh) on one 128-query x 128-key tile at head_dim 64 and 128, before any
GPU run.

Each kernel formula is transcribed (copy_rows with the s_key permutation, copy_cols, the swizzle,
the dS store (a 4 x 4 byte transpose across lanes, then 32-bit words), the to_a_frags packing, the dQ atomics' lane swap, column_sum8's shuffles,
the epilogue's stores) and run for every thread; the tensor core is modelled by the PTX ISA's
fragment layouts (§9.7.15.5: the m64nNk32 accumulator, the register A fragment) and by the
K-major swizzled descriptor read (logical byte row·W + 32·kstep + c, stored at swizzle(offset)). The
products that result must equal plain matrix products of the same integer-valued operands: a wrong
index anywhere gives a different matrix.

head_dim 128 (docs/attention.md §"Backward"): Sᵀ and dPᵀ are products over 64-query halves h
(kCols = 64, B = Q̂/dÔ tile rows 64h..), P̃ fragments of both halves feed one dV product over the
128 queries in two 64-column parts of head_dim, half 0's dS is parked in shared memory as
[element][thread] float4s (the dŜ tile's space), and the residual sums of half h sit at group
2h + kk.

The warp-specialized 64 x 64 kernel (flash_bwd_ws_sm90.cu) shares the tile step's formulas; its own
indexing (64-query operand tiles, per-consumer column offsets, row-sum chunks, the staged dQ) is
test_warp_specialized_operands'.
"""
import numpy as np
import pytest

BM, BN, WG_KEYS, THREADS = 128, 128, 64, 256
rng = np.random.default_rng(7)


def k_cols(d):
    """bwdw::kCols: queries per Sᵀ / dPᵀ product (a 64-query half at both head_dims)."""
    return BM // 2


def s_key(nt, n):
    return 32 * (nt // 4) + 16 * ((nt // 2) % 2) + 4 * (n // 2) + 2 * (nt % 2) + n % 2


def byte_perm(x, y, sel):
    """CUDA __byte_perm: byte n of the result is byte (sel >> 4n) & 7 of the 8 bytes y:x."""
    src = [(x >> (8 * k)) & 0xFF for k in range(4)] + [(y >> (8 * k)) & 0xFF for k in range(4)]
    return sum(src[(sel >> (4 * n)) & 7] << (8 * n) for n in range(4))


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


@pytest.mark.parametrize("D", [64, 128])
def test_tile_products_and_scatter(D):
    tq_p, i0 = 256, 128  # the second query block of a 256-row head
    n = k_cols(D)
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
        frags = {}  # lane -> the P̃ A fragments over the 128 queries (pa[kN/32·h + kk])
        for h in range(BM // n):
            # tile_product's B: kN rows of the Q̂ tile from row kN·h (stage + kN·h·kD)
            b = desc_read(s_q, n * h * D, n, D, D)
            st = a @ b.T  # Sᵀ of half h as the tensor core forms it (m64nNk32, N = kN)
            # tile_prob's column -> query: element (i, e) of lane (w, g, t) is key 64wg + 16w +
            # g + 8(e/2), query q_off + s_key(i, 2t + e%2), q_off = kN·h.
            for _, wg_, w, g, t in threads():
                if wg_ != wg:
                    continue
                acc = acc_of(st, w, g, t)
                for i in range(n // 8):
                    for e in range(4):
                        key = WG_KEYS * wg + 16 * w + g + 8 * (e // 2)
                        qq = n * h + s_key(i, 2 * t + e % 2)
                        assert acc[i][e] == k[key] @ q_blk[qq]
                # P̃ (the S values as stand-in codes) -> A fragments over queries, natural order
                frags.setdefault((w, g, t), []).extend(to_a_frags(acc))
        a_p = a_frags_matrix(frags)
        np.testing.assert_array_equal(a_p, (k[64 * wg:64 * wg + 64] @ q_blk.T))
        # dV's product (dv_product): A = P̃ᵀ [keys][queries], B = (dO/l)~ᵀ [d][queries] in head_dim
        # parts of kNd rows from row kNd·part; accumulator n-tile dn of part -> dv[kNd/8·part + dn]
        knd = D if D == 64 else 64
        dv = np.zeros((64, D), dtype=np.int64)
        for part in range(D // knd):
            b_dv = desc_read(s_dvt, part * knd * BM, knd, BM, 128)
            np.testing.assert_array_equal(b_dv, dvo[i0:i0 + BM, knd * part:knd * (part + 1)].T)
            prod = a_p @ b_dv.T
            for _, wg_, w, g, t in threads():
                if wg_ != wg:
                    continue
                acc = acc_of(prod, w, g, t)
                for dn in range(knd // 8):
                    for e in range(4):
                        col = 8 * (knd // 8 * part + dn) + 2 * t + e % 2  # the epilogue's dv column
                        dv[16 * w + g + 8 * (e // 2), col] += acc[dn][e]
        np.testing.assert_array_equal(dv, (k[64 * wg:64 * wg + 64] @ q_blk.T) @ dvo[i0:i0 + BM])
        # dQ's B = K̂ᵀ [d][keys]
        np.testing.assert_array_equal(desc_read(s_kt, 0, D, BN, 128), k.T)


def test_park_is_one_slot_per_thread_value():
    """head_dim 128: park[i·kThreads + tid] float4 = s[i][0..3], i < kCols/8: every float of the
    kPark bytes written once, each thread reads back its own values; the dŜ bytes fit inside."""
    n = k_cols(128)
    park_bytes = THREADS * (n // 8) * 4 * 4  # MainLayout::kPark
    owner = np.full(park_bytes // 4, -1)
    for tid in range(THREADS):
        for i in range(n // 8):
            f0 = 4 * (i * THREADS + tid)
            assert (owner[f0:f0 + 4] == -1).all()
            owner[f0:f0 + 4] = tid
    assert (owner >= 0).all() and park_bytes == 32768 and park_bytes >= BM * BN


@pytest.mark.parametrize("D", [64, 128])
def test_shared_memory_layouts(D):
    """MainLayout (flash_bwd_sm90.cu) / RowLayout (flash_bwd_delta_sm90.cu) offsets: 1024-aligned
    tiles, no overlap, within 227 KiB; the pre-pass's twice within an SM's 228 KiB."""
    col_stats = 5 * BM * 4  # ColStats: bias, l, rcp_lp, delta, vis
    rows = BN * D
    park = THREADS * (k_cols(D) // 8) * 16
    k_, v_, kt, ds = 0, rows, 2 * rows, 3 * rows
    stage0 = ds + max(park, BM * BN)
    stage = 4 * rows
    stats = stage0 + 2 * stage
    main_bytes = stats + 2 * col_stats + 3 * 8 + 1024
    for off in (k_, v_, kt, ds, stage0, stage0 + stage):
        assert off % 1024 == 0
    assert main_bytes + 64 <= 227 * 1024, main_bytes
    assert main_bytes == (129048 if D == 64 else 219160)
    row_bytes = 6 * rows + 3 * 8 + 1024  # Q̂, dÔ, two stages of K̂, V̂; the mbarriers
    assert 2 * (row_bytes + 1024) <= 228 * 1024, row_bytes


@pytest.mark.parametrize("D", [64, 128])
def test_residual_sum_groups_cover_each_query_once(D):
    """residual_sums' query q_off + column_sum8_query(kk) of half h: the same query as
    column_sum8_query of the tile group kN/32·h + kk, every query once."""
    n = k_cols(D)
    seen = []
    for h in range(BM // n):
        for kk in range(n // 32):
            for g in range(8):
                for t in range(4):
                    qq = n * h + s_key(4 * kk + g // 2, 2 * t + g % 2)
                    assert qq == s_key(4 * (n // 32 * h + kk) + g // 2, 2 * t + g % 2)
                    seen.append(qq)
    assert sorted(seen) == list(range(BM))


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("form", ["bytes", "words"])
def test_ds_scatter_and_dq_atomics(D, form):
    n = k_cols(D)
    ds = rng.integers(0, 255, (BM, BN))  # dŜ codes [query][key]
    sds = np.full(BM * BN, -1, dtype=np.int64)
    words = {}  # (wg, w, g, t) -> the lane's dŜ fragments as 32-bit words, byte c = c-th query
    for _, wg, w, g, t in threads():
        # the lane's dS accumulator values per half h (keys 64wg + 16w + g (+8), query kN·h +
        # s_key(i, ...)); to_a_frags per half, dsa[kN/32·h + kk] (head_dim 64: one half)
        dsa = []
        for h in range(BM // n):
            acc = [[ds[n * h + s_key(i, 2 * t + e % 2), WG_KEYS * wg + 16 * w + g + 8 * (e // 2)]
                    for e in range(4)] for i in range(n // 8)]
            dsa.extend(to_a_frags(acc))
        words[wg, w, g, t] = [[sum(int(dsa[kk][r][c]) << (8 * c) for c in range(4)) for r in range(4)]
                              for kk in range(BM // 32)]
    # store_ds_bytes (the lockstep kernel): byte c of a[r] at query 32kk + 16(r/2) + 4t + c, key g (+8)
    for (wg, w, g, t), frags in words.items():
        if form != "bytes":
            break
        for kk in range(BM // 32):
            for r in range(4):
                for c in range(4):
                    qq = 32 * kk + 16 * (r // 2) + 4 * t + c
                    sds[swizzle(qq * BN + WG_KEYS * wg + 16 * w + g + 8 * (r % 2), 128)] = \
                        (frags[kk][r] >> (8 * c)) & 0xFF
    # store_ds_frag (the warp-specialized kernel): lanes g0..g0 + 3 of one t transpose their 4 x 4
    # bytes (lane ^ 8 is g ^ 2, lane ^ 4 is g ^ 1) and lane g0 + i stores query 4t + i's word of keys
    # g0..g0 + 3
    for (wg, w, g, t), frags in words.items():
        if form != "words":
            break
        i, g0 = g & 3, g & 4
        sel1, sel2 = (0x3276 if i & 2 else 0x5410), (0x3715 if i & 1 else 0x6240)
        for kk in range(BM // 32):
            for r in range(4):
                def w1(gg):
                    return byte_perm(words[wg, w, gg, t][kk][r], words[wg, w, gg ^ 2, t][kk][r],
                                     0x3276 if gg & 2 else 0x5410)
                word = byte_perm(w1(g), w1(g ^ 1), sel2)
                assert w1(g) == byte_perm(frags[kk][r], words[wg, w, g ^ 2, t][kk][r], sel1)
                qq = 32 * kk + 16 * (r // 2) + 4 * t + i
                at = swizzle(qq * BN + WG_KEYS * wg + 16 * w + g0 + 8 * (r % 2), 128)
                assert at % 4 == 0
                for c in range(4):
                    sds[at + c] = (word >> (8 * c)) & 0xFF
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


@pytest.mark.parametrize("D", [64, 128])
def test_column_sum8_and_epilogue(D):
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


@pytest.mark.parametrize("D", [64, 128])
def test_warp_specialized_operands(D):
    """The 64 x 64 kernel's own indexing (flash_bwd_ws_sm90.cu): the 64-query transposed tiles (Q̂ᵀ,
    (dO/l)~ᵀ [D][64], 64-byte swizzle) read by kmajor_desc<64> for dK's B and, in 64-column parts, dV's;
    consumer c's dQ operands at column offset 64c of the 128-byte-swizzled dŜ [64][128] and K̂ᵀ [D][128]
    tiles; add_ds_row_sums' chunks 4c + 2h + k (stored at chunk ^ q % 8) covering each row's keys 64c..
    once; stage_dq<D, 64>'s rows 16w + g (+8) and the dq boxes' swizzle holding the consumer's part."""
    q_t = rng.integers(0, 50, (D, 64))  # Q̂ᵀ of one step: [dim][query]
    tile = np.full(D * 64, -1, dtype=np.int64)  # the TMA box [D][64] lands row by row, 64-byte swizzle
    for r in range(D):
        for col in range(64):
            tile[swizzle(r * 64 + col, 64)] = q_t[r, col]
    np.testing.assert_array_equal(desc_read(tile, 0, D, 64, 64), q_t)  # dK's B
    for part in range(D // 64):  # dv_product<kD, .., 64, 64>: rows 64·part.., at part·64·64
        np.testing.assert_array_equal(desc_read(tile, part * 64 * 64, 64, 64, 64), q_t[64 * part:64 * part + 64])
    ds = rng.integers(0, 255, (64, BN))  # dŜ [query][key]
    sds = np.full(64 * BN, -1, dtype=np.int64)
    for qq in range(64):
        for key in range(BN):
            sds[swizzle(qq * BN + key, 128)] = ds[qq, key]
    k = rng.integers(0, 50, (BN, D))
    kt = copy_cols(k.T.copy(), 0, BN, D)  # K̂ᵀ [D][128 keys]
    for c in range(2):
        np.testing.assert_array_equal(desc_read(sds, 64 * c, 64, 64, 128), ds[:, 64 * c:64 * c + 64])
        np.testing.assert_array_equal(desc_read(kt, 64 * c, D, 64, 128), k[64 * c:64 * c + 64].T)
        for tid in range(128):  # add_ds_row_sums: thread tid, row tid / 2, half tid % 2
            qq, h = tid // 2, tid % 2
            if h:
                continue
            seen = []
            for hh in range(2):
                for kk in range(2):
                    chunk = 4 * c + 2 * hh + kk
                    at = qq * BN + 16 * (chunk ^ (qq % 8))
                    seen += [sds[at + b] for b in range(16)]
            assert sorted(seen) == sorted(ds[qq, 64 * c:64 * c + 64].tolist())
    part = rng.integers(-99, 99, (64, D))  # a consumer's dQ part [query][dim]
    box_bytes = 64 * D  # four boxes [64][D/4] FP32, rows of D bytes
    staged = {}
    for w in range(4):
        for g in range(8):
            for t in range(4):
                aq = acc_of(part, w, g, t)
                for dn in range(D // 8):
                    box, col = dn // (D // 32), 8 * (dn % (D // 32)) + 2 * t
                    for r in range(2):
                        row = 16 * w + g + 8 * r  # row0 + 8r
                        for e in range(2):
                            at = box * box_bytes + swizzle(row * D + 4 * (col + e), D)
                            assert at not in staged
                            staged[at] = aq[dn][2 * r + e]
    assert len(staged) == 64 * D
    for box in range(4):  # the reduce reads box element (row, j) at swizzle(row·D + 4j)
        for row in range(64):
            for j in range(D // 4):
                assert staged[box * box_bytes + swizzle(row * D + 4 * j, D)] == part[row, box * D // 4 + j]
