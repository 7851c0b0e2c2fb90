// octet/export.h — a trained run as a Hugging Face `transformers` model folder. (docs/use.md
// §"Export to Hugging Face")
//
// For the Llama-shaped configurations (pre-norm RMSNorm, RoPE, SwiGLU, no QK-norm, no μnit
// scales; GQA and tied or untied embeddings as they are) the folder holds a LlamaForCausalLM
// config.json, model.safetensors with the Hugging Face tensor names and layouts, and the tokenizer
// as tokenizer.json (the `tokenizers` format) + tokenizer_config.json, so that
// `AutoModelForCausalLM.from_pretrained(dir)` and `AutoTokenizer.from_pretrained(dir)` load it.
// Layouts: octet's fused qkv rows [q heads | k heads | v heads] become q_proj, k_proj, v_proj;
// fc1 rows [gate | up] become gate_proj, up_proj; octet's RoPE pairs (i, i + Dh/2), which is
// Llama's rotate_half, so no row permutation is needed.
// Tokenizer: octet's BPE encodes each line with SentencePiece (a dummy-prefix U+2581 per line) and
// a <nl> piece per newline; the export writes the same vocabulary with <nl> renamed "\n" (the one
// added token, split out first; "<nl>" and "<unk>" typed in the text are text, as for octet), a
// normalizer that prepends U+2581 and maps spaces to it, and the BPE merges of every piece ranked
// by its SentencePiece score. config.json holds the configured floats as given (1e-05, not the
// float widened to double). The byte tokenizer becomes a BPE model of the 256 byte pieces <0xNN>
// with byte fallback.
#pragma once

#include <string>

#include "octet/train.h"

namespace octet {

struct ExportOptions {
  std::string format = "hf";   ///< the only format
  std::string dtype = "bf16";  ///< "bf16" | "fp32": the weights' dtype in model.safetensors
};

/// Throws octet::Error naming the first option with no Hugging Face Llama equivalent, e.g.
/// "model.qk_norm = true has no equivalent in LlamaForCausalLM; not exported".
void check_hf_exportable(const RunConfig& cfg);

/// Writes the folder `out_dir` (created; must not exist or be empty) from the run in `run_dir`
/// (weights as load_run picks them). Throws octet::Error: a missing run, an unsupported config, an
/// unknown dtype or format, a non-empty or unwritable out_dir. Nothing is written before the checks.
void export_run(const std::string& run_dir, const std::string& out_dir, const ExportOptions& opt,
                const std::string& checkpoint = "");

}  // namespace octet
