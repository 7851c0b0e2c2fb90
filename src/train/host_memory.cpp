// src/train/host_memory.cpp — the host memory a run can count on (octet/train.h), and the check
// that a CPU run fits it before its directory is created: Linux overcommits, so a run beyond it is
// not refused by an allocation but killed by the kernel mid-step, leaving a run directory that
// neither resumes nor can be reused.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "model/layout.h"
#include "octet/error.h"
#include "octet/train.h"

namespace octet {

double host_memory_available() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  double kb = 0;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024.0;
  const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? double(pages) * double(page) : 0.0;
}

double cpu_train_bytes_lower_bound(const ModelConfig& model, int64_t micro_batch) {
  double params = 0;
  for (const ParamInfo& p : model_detail::build_param_table(model)) params += double(p.numel);
  // FP32 parameters, gradients and AdamW's two moments, and one micro-batch's logits and their
  // gradient (FP32): what every step holds at once, before any other activation.
  return params * 16.0 + double(micro_batch) * double(model.seq_len) * double(model.vocab_size) * 8.0;
}

void check_cpu_train_memory(const ModelConfig& model, int64_t micro_batch, int processes) {
  const double need = cpu_train_bytes_lower_bound(model, micro_batch) * double(processes);
  const double avail = host_memory_available();
  if (avail <= 0 || need <= avail) return;
  char msg[320];
  std::snprintf(msg, sizeof msg,
                "train on the cpu needs at least %.3g GB (%d process%s: parameters, gradients and AdamW "
                "state, and one micro-batch's logits each) but %.3g GB of memory is available; lower "
                "model.vocab_size, model.seq_len, train.batch_size or the model's size",
                need / 1e9, processes, processes == 1 ? "" : "es", avail / 1e9);
  throw OutOfMemory(msg);  // a run the machine cannot hold: "failed" (exit 1), not bad input
}

}  // namespace octet
