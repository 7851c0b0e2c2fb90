// `octet sample --run D --prompt "..." [--max-new-tokens N --temperature T --top-k K --top-p P
// --seed S --precision fp32|bf16 --device cpu|cuda --json]`: generation with a KV cache
// (generate.h), streaming the text to stdout as tokens come. --json prints one object instead
// (prompt ids, new ids, text, and the raw logits of the prompt's last position, before any sampling
// transform: the oracle tests use it).
#include <cstdio>
#include <nlohmann/json.hpp>

#include "octet/command.h"
#include "octet/error.h"
#include "octet/eval.h"
#include "octet/generate.h"

namespace {

struct SampleArgs {
  std::string run, device, checkpoint, prompt, precision;
  octet::SampleOptions opt;
  bool json = false;
};

void run_sample(SampleArgs& a) {
  using namespace octet;
  a.opt.validate();
  LoadedRun r = load_run(a.run, a.device, a.checkpoint);
  auto tok = load_run_tokenizer(r.cfg, a.run);
  const std::vector<int32_t> prompt = tok->encode(a.prompt);
  OCTET_CHECK(!prompt.empty(), "the prompt is empty (--prompt)");
  OCTET_CHECK(int64_t(prompt.size()) <= r.cfg.model.seq_len,
              "the prompt has " + std::to_string(prompt.size()) + " tokens; the context holds " +
                  std::to_string(r.cfg.model.seq_len) + " (model.seq_len)");
  const std::string prec = a.precision.empty() ? (r.backend->name() == "cpu" ? "fp32" : "bf16") : a.precision;
  Generator gen(*r.model, parse_decode_precision(prec));
  if (a.json) {
    const std::vector<float> logits = gen.feed(prompt);
    const size_t V = size_t(r.cfg.model.vocab_size);
    const std::vector<float> last(logits.end() - std::ptrdiff_t(V), logits.end());
    const std::vector<int32_t> out = generate(gen, prompt, a.opt);
    nlohmann::json j = {{"prompt_ids", prompt},
                        {"ids", out},
                        {"text", tok->decode(out)},
                        {"precision", prec},
                        {"last_logits", last}};
    // Invalid UTF-8 (a byte token cut from its character) becomes U+FFFD in the JSON text.
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return;
  }
  std::vector<int32_t> seq = prompt;
  std::string shown = tok->decode(seq);
  std::fwrite(shown.data(), 1, shown.size(), stdout);
  std::fflush(stdout);
  generate(gen, prompt, a.opt, [&](int32_t t) {
    seq.push_back(t);
    const std::string now = tok->decode(seq);  // decode(prefix) is a prefix of decode(seq)
    std::fwrite(now.data() + shown.size(), 1, now.size() - shown.size(), stdout);
    std::fflush(stdout);
    shown = now;
  });
  std::printf("\n");
}

}  // namespace

OCTET_COMMAND("sample", [](CLI::App& app) {
  auto a = std::make_shared<SampleArgs>();
  auto* cmd = app.add_subcommand("sample", "Generate text from a trained run (KV cache, streamed)");
  cmd->add_option("--run", a->run, "run directory (octet train --out)")->required();
  cmd->add_option("--checkpoint", a->checkpoint, "weights file (default: the run's checkpoint or model)");
  cmd->add_option("--prompt", a->prompt, "the text to continue")->required();
  cmd->add_option("--max-new-tokens", a->opt.max_new_tokens,
                  "tokens to generate (stops early at the context)")
      ->capture_default_str();
  cmd->add_option("--temperature", a->opt.temperature, "0: greedy (deterministic)")->capture_default_str();
  cmd->add_option("--top-k", a->opt.top_k, "keep the k most likely tokens (0: all)")->capture_default_str();
  cmd->add_option("--top-p", a->opt.top_p, "nucleus: smallest set with this probability")
      ->capture_default_str();
  octet::cli::add_seed_option(cmd, "--seed", a->opt.seed, "random seed")->capture_default_str();
  cmd->add_option("--precision", a->precision, "fp32 (cpu) | bf16 (default: fp32 on cpu, bf16 on cuda)");
  cmd->add_option("--device", a->device, "cpu | cuda | cuda:N (default: the run's)");
  cmd->add_flag(
      "--json", a->json,
      "one JSON object instead of the stream: prompt_ids, ids (the new tokens), text (their decoding), "
      "precision, and last_logits: the raw logits at the prompt's last position (which score the first "
      "new token), before temperature, top-k, top-p and softmax; vocab_size floats, computed in "
      "--precision");
  cmd->callback([a] { run_sample(*a); });
});
