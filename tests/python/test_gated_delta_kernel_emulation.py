"""NumPy emulation of the CUDA Gated DeltaNet kernels' algebra (src/cuda/gated_delta/gated_delta_forward.cu,
gated_delta_backward.cu; arXiv 2412.06464 §3.3), step by step as the kernels run it: one "CTA" per
(batch·head, block of 32 value columns), chunks of C positions walked forward (the states) and in
reverse (the backward, steps B1-B9 of gated_delta_backward.cu with its P, Z, X matrices and its
per-column-block partial sums of dq, dk, dg, dβ), against the naive sequential recurrence in FP64
differentiated by PyTorch autograd (an independent reference). This checks the decomposition the
kernels use on a machine without a GPU; tests/cuda/gated_delta/gated_delta_test.cpp checks the kernels themselves."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

VB = 32  # kGdnColumns


def naive_torch(q, k, v, g, beta, scale):
    """o[t] = scale·S_tᵀ q_t, S_t = α_t (I − β_t k_t k_tᵀ) S_{t−1} + β_t k_t v_tᵀ, one head."""
    T, K = q.shape
    S = torch.zeros(K, v.shape[1], dtype=q.dtype)
    out = []
    for t in range(T):
        a = torch.exp(g[t])
        kt = k[t][:, None]
        S = a * (S - beta[t] * kt @ (kt.T @ S)) + beta[t] * kt @ v[t][None, :]
        out.append(scale * S.T @ q[t])
    return torch.stack(out)


def chunk_setup(q, k, g, beta, t0, n):
    Q, Kc = q[t0:t0 + n], k[t0:t0 + n]
    gam = np.cumsum(g[t0:t0 + n])
    E = np.exp(gam[:, None] - gam[None, :])
    low = np.tril(np.ones((n, n)), -1)
    KKe = E * (Kc @ Kc.T) * low                 # i < r
    QKe = E * (Q @ Kc.T) * np.tril(np.ones((n, n)))  # i <= r
    Gam, eC = np.exp(gam), np.exp(gam[-1] - gam)
    return Q, Kc, gam, E, KKe, QKe, Gam, eC, beta[t0:t0 + n]


def solve_lower(KKe, b, X):
    X = X.copy()
    for r in range(1, X.shape[0]):
        X[r] -= b[r] * KKe[r, :r] @ X[:r]
    return X


def solve_upper(KKe, b, X):
    X = X.copy()
    n = X.shape[0]
    for i in range(n - 2, -1, -1):
        X[i] -= (b[i + 1:n] * KKe[i + 1:n, i]) @ X[i + 1:n]
    return X


def kernel_forward(q, k, v, g, beta, scale, C, j0):
    """forward_kernel for columns [j0, j0 + VB): o and the chunk-entering states."""
    T, K = q.shape
    S = np.zeros((K, VB))
    o = np.zeros((T, VB))
    states = []
    for t0 in range(0, T, C):
        n = min(C, T - t0)
        states.append(S.copy())
        Q, Kc, gam, E, KKe, QKe, Gam, eC, b = chunk_setup(q, k, g, beta, t0, n)
        s0k = Kc @ S
        X = b[:, None] * (v[t0:t0 + n, j0:j0 + VB] - Gam[:, None] * s0k)
        X = solve_lower(KKe, b, X)
        o[t0:t0 + n] = scale * (Gam[:, None] * (Q @ S) + QKe @ X)
        S = Gam[-1] * S + (eC[:, None] * Kc).T @ X
    return o, states


def kernel_backward(q, k, v, g, beta, d_o, scale, C, j0, states):
    """backward_kernel for columns [j0, j0 + VB): dv and the partials dq, dk, dg, dβ (B1-B9)."""
    T, K = q.shape
    G = np.zeros((K, VB))
    dq, dk, dv = np.zeros((T, K)), np.zeros((T, K)), np.zeros((T, VB))
    dg, db = np.zeros(T), np.zeros(T)
    starts = list(range(0, T, C))
    for ch in reversed(range(len(starts))):
        t0 = starts[ch]
        n = min(C, T - t0)
        S0 = states[ch]
        Q, Kc, gam, E, KKe, QKe, Gam, eC, b = chunk_setup(q, k, g, beta, t0, n)
        V, dO = v[t0:t0 + n, j0:j0 + VB], d_o[t0:t0 + n, j0:j0 + VB]
        s0k = Kc @ S0                                                    # B2
        X = solve_lower(KKe, b, b[:, None] * (V - Gam[:, None] * s0k))  # B3: Δ
        kg, sq = Kc @ G, Q @ S0                                          # B4
        dR = scale * QKe.T @ dO + eC[:, None] * kg
        y = np.sum(kg * X, axis=1)
        yC = eC * y
        dgA = scale * Gam * np.sum(dO * sq, axis=1) - eC * y
        dR = solve_upper(KKe, b, dR)                                     # B5
        DOD, DRD = dO @ X.T, dR @ X.T                                    # B6
        le, lt = np.tril(np.ones((n, n))), np.tril(np.ones((n, n)), -1)
        P = scale * E * DOD * le
        Z = -b[:, None] * E * DRD * lt
        Xm = (scale * DOD * QKe) * le - (b[:, None] * DRD * KKe) * lt
        dgB = Xm.sum(axis=1)
        dbA = -(DRD * KKe * lt).sum(axis=1)
        gs = np.sum(G * S0)
        dv[t0:t0 + n] = b[:, None] * dR                                  # B7
        dbB = np.sum(dR * (V - Gam[:, None] * s0k), axis=1)
        dgC = -b * Gam * np.sum(dR * s0k, axis=1)
        dq[t0:t0 + n] = P @ Kc + scale * Gam[:, None] * (dO @ S0.T)
        dk[t0:t0 + n] = (P.T @ Q + (Z + Z.T) @ Kc - (b * Gam)[:, None] * (dR @ S0.T)
                         + eC[:, None] * (X @ G.T))
        colX = Xm.sum(axis=0)
        G = Gam[-1] * G + Q.T @ (scale * Gam[:, None] * dO) - Kc.T @ ((b * Gam)[:, None] * dR)  # B8
        dgam = dgA + dgB + dgC - colX                                    # B9
        dgam[n - 1] += Gam[-1] * gs + yC.sum()
        dg[t0:t0 + n] = np.cumsum(dgam[::-1])[::-1]
        db[t0:t0 + n] = dbA + dbB
    return dq, dk, dv, dg, db


@pytest.mark.parametrize("T,K,V,C", [(1, 32, 32, 64), (17, 64, 64, 64), (65, 32, 64, 64),
                                     (130, 64, 96, 64), (70, 32, 32, 16)])
def test_kernel_decomposition_matches_autograd(T, K, V, C):
    rng = np.random.default_rng(T * 7 + K)
    q = rng.standard_normal((T, K)); q /= np.linalg.norm(q, axis=1, keepdims=True)
    k = rng.standard_normal((T, K)); k /= np.linalg.norm(k, axis=1, keepdims=True)
    v = rng.standard_normal((T, V))
    a, bb = 3 * rng.standard_normal(T), 1.5 * rng.standard_normal(T)
    g = -np.logaddexp(0, -a) / 16  # log σ(a)/16
    beta = 1 / (1 + np.exp(-bb))
    d_o = rng.standard_normal((T, V))
    scale = 0.7

    tq, tk, tv, tg, tb = (torch.tensor(x, requires_grad=True) for x in (q, k, v, g, beta))
    to = naive_torch(tq, tk, tv, tg, tb, scale)
    to.backward(torch.tensor(d_o))

    o = np.zeros((T, V))
    dq, dk, dv, dg, db = np.zeros((T, K)), np.zeros((T, K)), np.zeros((T, V)), np.zeros(T), np.zeros(T)
    for j0 in range(0, V, VB):  # the column-block CTAs; the finish kernel sums their partials
        oc, states = kernel_forward(q, k, v, g, beta, scale, C, j0)
        o[:, j0:j0 + VB] = oc
        pq, pk, pv, pg, pb = kernel_backward(q, k, v, g, beta, d_o, scale, C, j0, states)
        dq += pq; dk += pk; dv[:, j0:j0 + VB] = pv; dg += pg; db += pb

    for name, got, want in [("o", o, to.detach().numpy()), ("dq", dq, tq.grad.numpy()),
                            ("dk", dk, tk.grad.numpy()), ("dv", dv, tv.grad.numpy()),
                            ("dg", dg, tg.grad.numpy()), ("dbeta", db, tb.grad.numpy())]:
        err = np.linalg.norm(got - want) / max(np.linalg.norm(want), 1.0)  # absolute where want ~ 0
        assert err < 1e-10, f"{name}: relative L2 error {err:.2e}"
