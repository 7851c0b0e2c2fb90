// `octet eval --run D [--data PATH] [--device cpu|cuda] [--json]`: loss (nats/token), perplexity
// and bits per byte of a trained run on any text, without training (docs/use.md). Without --data
// it scores the run's own validation split exactly as the trainer does (its logged val loss).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "octet/command.h"
#include "octet/error.h"
#include "octet/eval.h"

namespace {

struct EvalArgs {
  std::string run, data, device, checkpoint;
  bool json = false;
};

void run_eval(const EvalArgs& a) {
  using namespace octet;
  LoadedRun r = load_run(a.run, a.device, a.checkpoint);
  EvalResult e;
  std::string what;
  if (a.data.empty()) {
    // the run's validation split: its tokenizer, and the tokens the loaded weights trained on
    auto ds = load_dataset(r.cfg, nullptr, run_tokenizer_model(a.run));
    TrainState recorded;
    recorded.tokens_hash = r.tokens_hash;
    check_run_tokens(recorded, *ds, a.run, "score the validation split of",
                     "restore the corpus, or score a text with --data");
    e.loss = evaluate_validation(*r.model, *ds, r.cfg.train.eval_batches);
    e.perplexity = std::exp(e.loss);
    e.tokens = -1;  // not a text: bits per byte need the bytes behind the tokens
    what = "validation split (" + std::to_string(r.cfg.train.eval_batches) + " batches)";
  } else {
    auto tok = load_run_tokenizer(r.cfg, a.run);
    const Corpus corpus = read_corpus(a.data);  // the newlines put between files are not scored
    e = evaluate_text(*r.model, *tok, corpus.text, corpus.separators);
    what = a.data;
  }
  if (a.json) {
    nlohmann::json j = {{"run", a.run},
                        {"data", a.data.empty() ? nlohmann::json("validation") : nlohmann::json(a.data)},
                        {"arm", to_string(r.cfg.precision.arm)},
                        {"device", r.backend->name()},
                        {"loss", e.loss},
                        {"perplexity", e.perplexity}};
    if (e.tokens >= 0)
      j.update({{"bits_per_byte", e.bits_per_byte}, {"tokens", e.tokens}, {"bytes", e.bytes}});
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("%s on %s: loss %.4f nats/token | perplexity %.3f", a.run.c_str(), what.c_str(), e.loss,
              e.perplexity);
  if (e.tokens >= 0)
    std::printf(" | %.4f bits/byte | %lld tokens, %lld bytes", e.bits_per_byte,
                static_cast<long long>(e.tokens), static_cast<long long>(e.bytes));
  std::printf("\n");
}

}  // namespace

OCTET_COMMAND("eval", [](CLI::App& app) {
  auto a = std::make_shared<EvalArgs>();
  auto* cmd = app.add_subcommand("eval", "Loss, perplexity and bits per byte of a trained run on any text");
  cmd->add_option("--run", a->run, "run directory (octet train --out)")->required();
  cmd->add_option("--data", a->data, "text file, directory or glob (default: the run's validation split)");
  cmd->add_option("--device", a->device, "cpu | cuda | cuda:N (default: the run's)");
  cmd->add_option("--checkpoint", a->checkpoint, "weights file (default: the run's checkpoint or model)");
  cmd->add_flag("--json", a->json, "one JSON object");
  cmd->callback([a] { run_eval(*a); });
});
