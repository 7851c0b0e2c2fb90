// src/model/transformer.cpp — forward and backward of the decoder-only transformer of model.h,
// written once against the Backend interface (the CPU reference and the CUDA backend run this
// same code, as karpathy/llm.c keeps one readable trainer per layer structure).
//
// Every layer is two residual units x ← R(x, g(f(u(x)))) [+ post-norm]; the unit's norm sits at
// u (pre), g (output, FOG arXiv 2505.20524) or after R (post). Backward walks the same units in
// reverse: d(post-norm) → split by R → d(output norm) → d(sublayer) → d(pre-norm) + residual.
// Every op is enqueued on the backend: nothing here waits for the device except take_loss().
// Each linear and attention keeps its forward's saved state (model/impl.h) until its backward;
// under activation checkpointing (model.h ModelMemory) only until the end of its layer's forward,
// and the backward runs the layer's forward again first.
#include <cmath>

#include "model/impl.h"
#include "octet/error.h"

namespace octet {

using model_detail::LinearOp;

namespace {
// dst = a·x + b·y
void residual(Backend& be, float a, const Tensor& x, float b, const Tensor& y, const Tensor& dst) {
  be.copy(dst, x);
  if (a != 1.0f) be.scale(a, dst);
  be.axpy(b, y, dst);
}
}  // namespace

void Model::forward_backward(const int32_t* ids, const int32_t* targets, bool backward, float grad_scale) {
  OCTET_CHECK(ids != nullptr && targets != nullptr, "forward_backward: null ids or targets");
  Impl& m = *impl_;
  Backend& be = backend_;
  const ModelConfig& c = config_;
  const NormPlacement place = c.norm_placement;
  const AttnLayout layout = attention_shape(c, m.B).layout;  // of q, k, v, o and their gradients
  be.upload(m.ids, ids);
  be.upload(m.targets, targets);
  // The producers' amaxes accumulate (max) from zero; a layer's forward run again under activation
  // checkpointing takes the max of the same values again, the same bits.
  if (!m.amax.empty()) be.fill(m.amax, 0.0);
  m.captured = false;  // a capture describes the forward it was taken in

  // ---- forward ----
  be.embedding_forward(m.ids, m.wte, m.stream[0]);
  if (c.positions == PositionKind::Learned)
    for (int64_t b = 0; b < m.B; ++b) be.axpy(1.0f, m.wpe, m.stream[0].slice(b * m.T, m.T));
  // Layer l's two units from its input stream[2l] (run again by the backward under activation
  // checkpointing: the same kernels on the same inputs, so the same bits).
  auto forward_layer = [&](int64_t l) {
    for (int k = 0; k < 2; ++k) {
      UnitBuffers& U = m.units[size_t(2 * l + k)];
      const Tensor& x = m.stream[size_t(2 * l + k)];
      const Tensor& out = m.stream[size_t(2 * l + k + 1)];
      Tensor u = x;
      // u's amax for the sublayer's first linear (pre-norm: the norm writes u; a Gated DeltaNet
      // mixer's linears are BF16 and take none)
      const bool u_cast = place == NormPlacement::Pre && (k == 1 || c.attention_layer(l));
      const Tensor u_amax = u_cast ? m.amax_slot(l, k) : Tensor{};
      if (place == NormPlacement::Pre) {
        U.norm.forward(be, x, U.u, U.mean, U.rstd, u_amax);
        u = U.u;
      }
      // Pre-norm with R(x, y) = x + y (the default): the sublayer's last linear adds x in its GEMM's
      // epilogue and writes the sum into the unit's output (rounded once; Linear::forward residual);
      // a Gated DeltaNet mixer writes there and x is added in place (round(f + x)).
      const bool in_place = place == NormPlacement::Pre && m.res_a == 1.0f && m.res_b == 1.0f;
      const Tensor& f = in_place ? out : U.f;
      const Tensor res = in_place ? x : Tensor{};
      if (k == 0 && !c.attention_layer(l)) {
        m.gdn[size_t(l)].forward(be, u, f);
      } else if (k == 0) {
        AttnLayer& al = m.attn[size_t(l)];
        al.qkv.forward(be, u, al.qkv_out, u_amax);
        const Tensor& q0 = c.qk_norm ? al.q_raw : al.q;
        const Tensor& k0 = c.qk_norm ? al.k_raw : al.k;
        be.split_qkv(al.qkv_out, q0, k0, al.v, layout);
        if (c.qk_norm) {
          al.q_norm.forward(be, al.q_raw, al.q, {}, al.q_rstd);
          al.k_norm.forward(be, al.k_raw, al.k, {}, al.k_rstd);
        }
        if (c.positions == PositionKind::RoPE) {
          be.rope(al.q, c.rope_theta, false, layout);
          be.rope(al.k, c.rope_theta, false, layout);
        }
        // o is ot tokens-major (impl.h AttnLayer): the projection reads it as it lies
        al.saved = al.attn->forward(al.q, al.k, al.v, al.o, al.lse);
        al.proj.forward(be, al.ot, f, {}, res);
      } else {
        MlpLayer& ml = m.mlp[size_t(l)];
        ml.fc1.forward(be, u, ml.h, u_amax);
        if (c.mlp == MlpKind::SwiGLU) {
          be.swiglu_forward(ml.h, ml.a);
          ml.fc2.forward(be, ml.a, f, {}, res);
        } else {
          be.gelu_forward(ml.h, ml.a, m.amax_slot(l, 2));
          ml.fc2.forward(be, ml.a, f, m.amax_slot(l, 2), res);
        }
      }
      if (in_place) {
        if (k == 0 && !c.attention_layer(l)) be.axpy(1.0f, x, out);
        continue;
      }
      Tensor g = U.f;
      if (place == NormPlacement::Output) {
        U.norm.forward(be, U.f, m.gtmp, U.mean, U.rstd);
        g = m.gtmp;
      }
      if (place == NormPlacement::Post) {
        residual(be, m.res_a, x, m.res_b, g, U.s);
        U.norm.forward(be, U.s, out, U.mean, U.rstd);
      } else {
        residual(be, m.res_a, x, m.res_b, g, out);
      }
    }
  };
  // Under activation checkpointing a layer's saved operands are freed once its forward is done.
  const bool recompute = memory_.activation_checkpointing;
  auto release_layer = [&](int64_t l) {
    AttnLayer& al = m.attn[size_t(l)];
    GdnLayer& gl = m.gdn[size_t(l)];
    MlpLayer& ml = m.mlp[size_t(l)];
    al.saved = {};
    for (LinearOp* op : {&al.qkv, &al.proj, &gl.qkv, &gl.gates, &gl.proj, &ml.fc1, &ml.fc2}) op->saved = {};
  };
  for (int64_t l = 0; l < c.n_layer; ++l) {
    forward_layer(l);
    if (recompute) release_layer(l);
  }
  const Tensor& xL = m.stream.back();
  m.norm_f.forward(be, xL, m.xf, m.mean_f, m.rstd_f);
  m.head.forward(be, m.xf, m.logits);
  be.cross_entropy(m.logits, m.targets, m.logits, grad_scale, m.loss);
  if (!backward) return;

  // ---- backward (m.logits now holds dlogits) ----
  m.head.backward(be, m.logits, m.dt1);
  m.norm_f.backward(be, xL, m.dt1, m.dcur, m.mean_f, m.rstd_f);
  // the seams of data parallel's gradient buckets (model.h set_grad_ready_hook)
  if (grad_ready_hook_) grad_ready_hook_(int64_t(param("norm_f.weight").offset));
  for (int64_t l = c.n_layer - 1; l >= 0; --l) {
    if (recompute) forward_layer(l);
    for (int k = 1; k >= 0; --k) {
      UnitBuffers& U = m.units[size_t(2 * l + k)];
      const Tensor& x = m.stream[size_t(2 * l + k)];
      // dcur = d(unit output). ds: gradient of the residual sum.
      if (place == NormPlacement::Post) {
        U.norm.backward(be, U.s, m.dcur, m.dt1, U.mean, U.rstd);
        be.copy(m.dcur, m.dt1);
      }
      // dt2 = dg = b·ds; dcur = dx = a·ds. With a = b = 1 and no output norm, the attention and
      // MLP backwards read dg without changing it (a Gated DeltaNet layer clobbers it): dcur itself.
      const bool gdn = k == 0 && !c.attention_layer(l);
      Tensor df = m.dt2;
      if (m.res_a == 1.0f && m.res_b == 1.0f && place != NormPlacement::Output && !gdn) {
        df = m.dcur;
      } else {
        be.copy(m.dt2, m.dcur);
        if (m.res_b != 1.0f) be.scale(m.res_b, m.dt2);
        if (m.res_a != 1.0f) be.scale(m.res_a, m.dcur);
      }
      if (place == NormPlacement::Output) {
        U.norm.backward(be, U.f, m.dt2, m.dt1, U.mean, U.rstd);
        df = m.dt1;
      }
      Tensor du = m.dt3;
      if (gdn) {
        m.gdn[size_t(l)].backward(be, df, du, m.gdn_scratch);
      } else if (k == 0) {
        AttnLayer& al = m.attn[size_t(l)];
        al.proj.backward(be, df, m.dot);                            // m.dout is m.dot tokens-major
        if (m.capture) be.copy(al.d_o_sample, m.dout.slice(0, 1));  // layer diagnostics (model.h)
        // the row residual (a diagnostic) only in the backwards that capture: it costs the fused
        // CUDA backward FP64 work per element (docs/attention.md §"Backward")
        al.attn->backward(al.saved, m.dout, m.dq, m.dk, m.dv, m.capture ? al.residual : Tensor{});
        if (c.positions == PositionKind::RoPE) {
          be.rope(m.dq, c.rope_theta, true, layout);
          be.rope(m.dk, c.rope_theta, true, layout);
        }
        Tensor dq = m.dq, dk = m.dk;
        if (c.qk_norm) {
          al.q_norm.backward(be, al.q_raw, m.dq, m.dq2, {}, al.q_rstd);
          al.k_norm.backward(be, al.k_raw, m.dk, m.dk2, {}, al.k_rstd);
          dq = m.dq2;
          dk = m.dk2;
        }
        be.merge_qkv(dq, dk, m.dv, m.dqkv, layout);
        al.qkv.backward(be, m.dqkv, du);
      } else {
        MlpLayer& ml = m.mlp[size_t(l)];
        ml.fc2.backward(be, df, m.da);
        if (c.mlp == MlpKind::SwiGLU) {
          be.swiglu_backward(ml.h, m.da, m.dh);
          ml.fc1.backward(be, m.dh, du);
        } else {
          be.gelu_backward(ml.h, m.da, m.dh, m.amax_slot(l, 3));
          ml.fc1.backward(be, m.dh, du, m.amax_slot(l, 3));
        }
      }
      if (place == NormPlacement::Pre)  // dcur += the norm's dx, in the norm backward's own pass
        U.norm.backward(be, x, m.dt3, m.dcur, U.mean, U.rstd, true);
      else
        be.axpy(1.0f, du, m.dcur);
    }
    if (recompute) release_layer(l);
    if (grad_ready_hook_) grad_ready_hook_(int64_t(param("h." + std::to_string(l) + ".norm1.weight").offset));
  }
  if (m.capture) m.n_backward += 1;
  m.captured = m.capture;
  be.embedding_backward(m.ids, m.dcur, m.dwte);
  if (c.positions == PositionKind::Learned)
    for (int64_t b = 0; b < m.B; ++b) be.axpy(1.0f, m.dcur.slice(b * m.T, m.T), m.dwpe);
}

const Tensor& Model::loss_sum() const { return impl_->loss; }

double Model::take_loss() {
  const double loss = backend_.read_f64(impl_->loss);
  backend_.fill(impl_->loss, 0.0);
  return loss;
}

double Model::step(const int32_t* ids, const int32_t* targets, bool backward, float grad_scale,
                   int64_t* n_counted) {
  forward_backward(ids, targets, backward, grad_scale);
  if (n_counted) {
    int64_t n = 0;
    for (int64_t i = 0; i < impl_->N; ++i) n += targets[i] >= 0;
    *n_counted = n;
  }
  return take_loss();
}

}  // namespace octet
