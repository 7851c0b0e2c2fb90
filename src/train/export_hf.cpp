// src/train/export_hf.cpp — `octet export --format hf` (octet/export.h): a run as a Hugging Face
// LlamaForCausalLM folder (config.json, model.safetensors, tokenizer.json, tokenizer_config.json).
// Names and layouts: transformers' modeling_llama (LlamaForCausalLM, LlamaRMSNorm, rotate_half);
// the tokenizer file: the `tokenizers` library's JSON (BPE model with byte fallback).
#include "octet/export.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "octet/error.h"
#include "octet/eval.h"
#include "octet/fp8.h"

namespace octet {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

const char* kMeta = "\xe2\x96\x81";  // U+2581, SentencePiece's whitespace

void refuse(bool bad, const std::string& option) {
  OCTET_CHECK(!bad, option + " has no equivalent in LlamaForCausalLM; not exported");
}

std::string byte_piece(int b) {
  char s[8];
  std::snprintf(s, sizeof s, "<0x%02X>", b);
  return s;
}

// tokenizer.json of the byte tokenizer: ids are bytes (every character falls back to its bytes).
json byte_tokenizer_json() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_piece(b)] = b;
  return {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer", nullptr},
      {"post_processor", nullptr},
      {"decoder",
       {{"type", "Sequence"}, {"decoders", json::array({{{"type", "ByteFallback"}}, {{"type", "Fuse"}}})}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", true},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", json::array()}}}};
}

// tokenizer.json of octet's SentencePiece BPE (see export.h): same ids as BpeTokenizer::encode.
json bpe_tokenizer_json(const std::string& model_path) {
  sentencepiece::SentencePieceProcessor sp;
  const auto st = sp.Load(model_path);
  OCTET_CHECK(st.ok(), "cannot load SentencePiece model " + model_path + ": " + st.ToString());
  const int n = sp.GetPieceSize(), nl = sp.PieceToId("<nl>");
  OCTET_CHECK(nl != sp.unk_id(), "SentencePiece model " + model_path + " lacks the <nl> piece");
  json vocab = json::object();
  std::map<std::string, int> ids;
  for (int i = 0; i < n; ++i) {
    const std::string p = i == nl ? "\n" : sp.IdToPiece(i);
    vocab[p] = i;
    ids[p] = i;
  }
  // Merges: every split of a normal piece into two pieces of the vocabulary, ranked by the piece's
  // score (SentencePiece BPE merges the pair whose result scores highest; ties: lower id first).
  std::vector<std::tuple<float, int, int, std::string, std::string>> merges;
  for (int i = 0; i < n; ++i) {
    if (!sp.IsByte(i) && !sp.IsUnknown(i) && !sp.IsControl(i) && i != nl) {
      const std::string p = sp.IdToPiece(i);
      for (size_t k = 1; k < p.size(); ++k) {
        if ((static_cast<unsigned char>(p[k]) & 0xC0) == 0x80) continue;  // inside a UTF-8 character
        const auto a = ids.find(p.substr(0, k)), b = ids.find(p.substr(k));
        if (a != ids.end() && b != ids.end() && !sp.IsByte(a->second) && !sp.IsByte(b->second))
          merges.emplace_back(-sp.GetScore(i), i, a->second, a->first, b->first);
      }
    }
  }
  std::sort(merges.begin(), merges.end());
  json jm = json::array();
  for (auto& m : merges) jm.push_back({std::get<3>(m), std::get<4>(m)});
  // The one added token is the newline. <unk> stays a vocabulary entry only (the BPE model's
  // unk_token): an added token would be matched in the text, where octet reads "<unk>" as text.
  const std::string unk = sp.IdToPiece(sp.unk_id());
  json added = json::array({{{"id", nl},
                             {"content", "\n"},
                             {"single_word", false},
                             {"lstrip", false},
                             {"rstrip", false},
                             {"normalized", false},
                             {"special", false}}});
  json normalizer = {
      {"type", "Sequence"},
      {"normalizers",
       json::array({{{"type", "Prepend"}, {"prepend", kMeta}},
                    {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kMeta}}})}};
  json decoder = {
      {"type", "Sequence"},
      {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", kMeta}}}, {"content", " "}},
                                {{"type", "ByteFallback"}},
                                {{"type", "Fuse"}},
                                // octet encodes line by line, one dummy-prefix space per line
                                // (Tokenizer::encode): drop the one after each newline too
                                {{"type", "Replace"}, {"pattern", {{"String", "\n "}}}, {"content", "\n"}},
                                {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}};
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added},
          {"normalizer", normalizer},
          {"pre_tokenizer", nullptr},
          {"post_processor", nullptr},
          {"decoder", decoder},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", unk},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", true},
            {"byte_fallback", true},
            {"ignore_merges", false},
            {"vocab", vocab},
            {"merges", jm}}}};
}

StTensor tensor(const std::vector<int64_t>& shape, const float* src, bool bf16) {
  StTensor t;
  t.shape = shape;
  size_t n = 1;
  for (int64_t s : shape) n *= size_t(s);
  if (bf16) {
    t.dtype = "BF16";
    t.data.resize(n * 2);
    for (size_t i = 0; i < n; ++i) {
      const uint16_t b = bf16_from_float(src[i]);
      std::memcpy(t.data.data() + 2 * i, &b, 2);
    }
  } else {
    t.dtype = "F32";
    t.data.resize(n * 4);
    std::memcpy(t.data.data(), src, n * 4);
  }
  return t;
}

// A configured float as the decimal it was given as (the float's shortest round-trip form: 1e-05),
// not the float widened to double (9.999999747378752e-06); it reads back as the same float.
double as_configured(float x) {
  char buf[32];
  const auto written = std::to_chars(buf, buf + sizeof buf, x);
  double d = 0;
  std::from_chars(buf, written.ptr, d);
  return d;
}

void write_text(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << s;
  OCTET_CHECK(f.good(), "cannot write " + p.string());
}

}  // namespace

void check_hf_exportable(const RunConfig& cfg) {
  const ModelConfig& m = cfg.model;
  refuse(m.norm != NormKind::RMSNorm, "model.norm = " + to_string(m.norm));
  refuse(m.norm_placement != NormPlacement::Pre, "model.norm_placement = " + to_string(m.norm_placement));
  refuse(m.positions != PositionKind::RoPE, "model.positions = " + to_string(m.positions));
  refuse(m.mlp != MlpKind::SwiGLU, "model.mlp = " + to_string(m.mlp));
  refuse(m.qk_norm, "model.qk_norm = true");
  refuse(m.unit_scaling, "model.unit_scaling = true (μnit scales)");
  refuse(m.mixer != MixerKind::Attention, "model.mixer = " + to_string(m.mixer) + " (Gated DeltaNet layers)");
}

void export_run(const std::string& run_dir, const std::string& out_dir, const ExportOptions& opt,
                const std::string& checkpoint) {
  OCTET_CHECK(opt.format == "hf", "unknown export format '" + opt.format + "' (known: hf)");
  OCTET_CHECK(opt.dtype == "bf16" || opt.dtype == "fp32",
              "unknown export dtype '" + opt.dtype + "' (known: bf16, fp32)");
  require_empty_or_new_dir(out_dir, "--out");
  LoadedRun r = load_run(run_dir, "cpu", checkpoint);
  check_hf_exportable(r.cfg);
  auto tok = load_run_tokenizer(r.cfg, run_dir);
  const json tok_json =
      r.cfg.data.tokenizer == "byte" ? byte_tokenizer_json() : bpe_tokenizer_json(tok->sentencepiece_model());

  const ModelConfig& c = r.cfg.model;
  const bool bf16 = opt.dtype == "bf16";
  const int64_t d = c.d_model, H = c.n_head, G = c.n_kv_head, Dh = c.head_dim(), F = c.d_ff;
  Model& model = *r.model;
  const std::vector<float> w = model.download_params();
  auto p = [&](const std::string& name) { return w.data() + model.param(name).offset; };
  StFile f;
  f.metadata["format"] = "pt";
  f.tensors["model.embed_tokens.weight"] = tensor({c.vocab_size, d}, p("wte"), bf16);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string o = "h." + std::to_string(l), hf = "model.layers." + std::to_string(l);
    const float* qkv = p(o + ".attn.qkv.weight");  // rows [q heads | k heads | v heads]
    f.tensors[hf + ".input_layernorm.weight"] = tensor({d}, p(o + ".norm1.weight"), bf16);
    f.tensors[hf + ".self_attn.q_proj.weight"] = tensor({H * Dh, d}, qkv, bf16);
    f.tensors[hf + ".self_attn.k_proj.weight"] = tensor({G * Dh, d}, qkv + H * Dh * d, bf16);
    f.tensors[hf + ".self_attn.v_proj.weight"] = tensor({G * Dh, d}, qkv + (H + G) * Dh * d, bf16);
    f.tensors[hf + ".self_attn.o_proj.weight"] = tensor({d, H * Dh}, p(o + ".attn.proj.weight"), bf16);
    f.tensors[hf + ".post_attention_layernorm.weight"] = tensor({d}, p(o + ".norm2.weight"), bf16);
    const float* fc1 = p(o + ".mlp.fc1.weight");  // rows [gate | up]
    f.tensors[hf + ".mlp.gate_proj.weight"] = tensor({F, d}, fc1, bf16);
    f.tensors[hf + ".mlp.up_proj.weight"] = tensor({F, d}, fc1 + F * d, bf16);
    f.tensors[hf + ".mlp.down_proj.weight"] = tensor({d, F}, p(o + ".mlp.fc2.weight"), bf16);
  }
  f.tensors["model.norm.weight"] = tensor({d}, p("norm_f.weight"), bf16);
  if (!c.tied_embeddings) f.tensors["lm_head.weight"] = tensor({c.vocab_size, d}, p("lm_head.weight"), bf16);

  const std::string dtype_name = bf16 ? "bfloat16" : "float32";
  json config = {{"architectures", {"LlamaForCausalLM"}},
                 {"model_type", "llama"},
                 {"vocab_size", c.vocab_size},
                 {"hidden_size", d},
                 {"intermediate_size", F},
                 {"num_hidden_layers", c.n_layer},
                 {"num_attention_heads", H},
                 {"num_key_value_heads", G},
                 {"head_dim", Dh},
                 {"max_position_embeddings", c.seq_len},
                 {"hidden_act", "silu"},
                 {"rms_norm_eps", as_configured(c.norm_eps)},
                 {"rope_theta", as_configured(c.rope_theta)},
                 {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", as_configured(c.rope_theta)}}},
                 {"attention_bias", false},
                 {"attention_dropout", 0.0},
                 {"mlp_bias", false},
                 {"tie_word_embeddings", c.tied_embeddings},
                 {"initializer_range", as_configured(c.init_std)},
                 {"bos_token_id", nullptr},
                 {"eos_token_id", nullptr},
                 {"pad_token_id", nullptr},
                 {"use_cache", true},
                 {"dtype", dtype_name},
                 {"torch_dtype", dtype_name},
                 {"octet_arm", to_string(r.cfg.precision.arm)}};
  json tok_config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                     {"model_max_length", c.seq_len},
                     {"add_bos_token", false},
                     {"add_eos_token", false},
                     {"clean_up_tokenization_spaces", false},
                     {"model_input_names", {"input_ids", "attention_mask"}}};

  create_output_dir(out_dir, "--out");
  const fs::path out(out_dir);
  write_text(out / "config.json", config.dump(2) + "\n");
  write_text(out / "tokenizer.json", tok_json.dump(2) + "\n");
  write_text(out / "tokenizer_config.json", tok_config.dump(2) + "\n");
  write_safetensors((out / "model.safetensors").string(), f);
}

}  // namespace octet
