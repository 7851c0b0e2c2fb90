// `octet export --run D --format hf --out DIR [--dtype bf16|fp32]`: a trained run as a folder that
// Hugging Face transformers loads as it is (export.h, docs/use.md). Configurations without a
// LlamaForCausalLM equivalent are refused with one line naming the option.
#include <cstdio>

#include "octet/command.h"
#include "octet/export.h"

namespace {
struct ExportArgs {
  std::string run, out, checkpoint;
  octet::ExportOptions opt;
};
}  // namespace

OCTET_COMMAND("export", [](CLI::App& app) {
  auto a = std::make_shared<ExportArgs>();
  auto* cmd = app.add_subcommand("export", "Export a trained run to a Hugging Face model folder");
  cmd->add_option("--run", a->run, "run directory (octet train --out)")->required();
  cmd->add_option("--out", a->out, "new (or empty) folder to write")->required();
  cmd->add_option("--format", a->opt.format, "hf (LlamaForCausalLM)")->capture_default_str();
  cmd->add_option("--dtype", a->opt.dtype, "bf16 | fp32: dtype of the exported weights")
      ->capture_default_str();
  cmd->add_option("--checkpoint", a->checkpoint, "weights file (default: the run's checkpoint or model)");
  cmd->callback([a] {
    octet::export_run(a->run, a->out, a->opt, a->checkpoint);
    std::printf("wrote %s: config.json, model.safetensors (%s), tokenizer.json, tokenizer_config.json\n",
                a->out.c_str(), a->opt.dtype.c_str());
  });
});
