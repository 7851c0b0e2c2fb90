// src/train/checkpoint.cpp — crash-safe checkpoints and weight files in safetensors.
//
// <out>/checkpoint.safetensors holds "param.<name>" (FP32 master weights), "adam_m.<name>" and
// "adam_v.<name>" (AdamW moments), "quant.<linear>" (the delayed-scaling state of a tensor-delayed
// FP8 linear's quantizers in Linear::quant_state's layout, e.g. "quant.h.0.attn.qkv", so that a
// resumed run scales bitwise like an uninterrupted one) and, in the metadata, the train state as
// JSON (step, AdamW step, data position, skipped steps, and the values of the run's meaning keys,
// which a resume checks config.toml against). It is written to a temporary file, fsynced
// and renamed, so the latest checkpoint is always complete. <out>/model.safetensors holds the
// weights under their plain names (what the PyTorch twin and other tools read).
#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "octet/error.h"
#include "octet/train.h"

namespace octet {

namespace {
void put_all(StFile& f, const std::string& prefix, const Model& model, const std::vector<float>& v) {
  for (const ParamInfo& p : model.params()) f.tensors[prefix + p.name] = st_f32(p.shape, v.data() + p.offset);
}
void get_all(const StFile& f, const std::string& file, const std::string& prefix, const Model& model,
             std::vector<float>& v) {
  v.assign(model.num_params(), 0.0f);
  for (const ParamInfo& p : model.params()) {
    auto it = f.tensors.find(prefix + p.name);
    OCTET_CHECK(
        it != f.tensors.end() || !f.tensors.count("model.embed_tokens.weight"),
        file +
            ": a Hugging Face model's weights (model.embed_tokens.weight, ...), not octet's: "
            "load them with transformers, or give a run's checkpoint.safetensors or model.safetensors");
    OCTET_CHECK(it != f.tensors.end(), file + ": missing tensor " + prefix + p.name);
    OCTET_CHECK(it->second.shape == p.shape,
                file + ": tensor " + prefix + p.name + " has a different shape than the model's");
    const std::vector<float> data = st_to_f32(it->second);
    std::copy(data.begin(), data.end(), v.begin() + int64_t(p.offset));
  }
  size_t expected = 0;
  for (auto& [name, t] : f.tensors) expected += name.rfind(prefix, 0) == 0;
  OCTET_CHECK(expected == model.params().size(),
              file + ": holds " + std::to_string(expected) + (prefix.empty() ? "" : " '" + prefix + "'") +
                  " tensors, the model has " + std::to_string(model.params().size()) +
                  " (different architecture?)");
}
}  // namespace

void save_checkpoint(const std::string& out_dir, Model& model, const std::vector<float>& adam_m,
                     const std::vector<float>& adam_v, const TrainState& s) {
  StFile f;
  put_all(f, "param.", model, model.download_params());
  put_all(f, "adam_m.", model, adam_m);
  put_all(f, "adam_v.", model, adam_v);
  nlohmann::json st = {{"format", "octet-checkpoint-1"},
                       {"step", s.step},
                       {"adam_step", s.adam_step},
                       {"data_position", s.data_position},
                       {"skipped_steps", s.skipped_steps},
                       {"bad_in_a_row", s.bad_in_a_row},
                       {"meaning", s.meaning}};
  if (!s.tokens_hash.empty()) st["tokens_hash"] = s.tokens_hash;
  for (const auto& [key, q] : model.quant_states())
    f.tensors["quant." + key] = st_f32({int64_t(q.size())}, q.data());
  f.metadata["octet_state"] = st.dump();
  write_safetensors(out_dir + "/checkpoint.safetensors", f);
}

namespace {
// The train state in a checkpoint's metadata (written by save_checkpoint).
TrainState parse_state(const std::map<std::string, std::string>& metadata, const std::string& file) {
  auto it = metadata.find("octet_state");
  OCTET_CHECK(it != metadata.end(), file + ": not an octet checkpoint (no octet_state metadata)");
  TrainState s;
  try {
    const nlohmann::json st = nlohmann::json::parse(it->second);
    OCTET_CHECK(st.at("format") == "octet-checkpoint-1", file + ": unknown checkpoint format");
    s.step = st.at("step").get<int64_t>();
    s.adam_step = st.at("adam_step").get<int64_t>();
    s.data_position = st.at("data_position").get<int64_t>();
    s.skipped_steps = st.at("skipped_steps").get<int64_t>();
    s.bad_in_a_row = st.at("bad_in_a_row").get<int64_t>();
    if (st.contains("meaning")) s.meaning = st.at("meaning").get<std::map<std::string, std::string>>();
    if (st.contains("tokens_hash")) s.tokens_hash = st.at("tokens_hash").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    OCTET_FAIL(file + ": corrupt checkpoint state (" + std::string(e.what()) + ")");
  }
  OCTET_CHECK(s.step >= 0 && s.adam_step >= 0 && s.data_position >= 0, file + ": corrupt checkpoint state");
  return s;
}
}  // namespace

TrainState read_checkpoint_state(const std::string& out_dir) {
  const std::string file = out_dir + "/checkpoint.safetensors";
  return parse_state(read_safetensors(file).metadata, file);
}

TrainState peek_checkpoint_state(const std::string& out_dir) {
  return peek_checkpoint_file_state(out_dir + "/checkpoint.safetensors");
}

TrainState peek_checkpoint_file_state(const std::string& file) {
  return parse_state(read_safetensors_metadata(file), file);
}

TrainState load_checkpoint(const std::string& out_dir, Model& model, std::vector<float>& adam_m,
                           std::vector<float>& adam_v) {
  return load_checkpoint_file(out_dir + "/checkpoint.safetensors", model, adam_m, adam_v);
}

bool is_training_checkpoint(const std::string& file) {
  return read_safetensors_metadata(file).count("octet_state") != 0;
}

TrainState load_checkpoint_file(const std::string& file, Model& model, std::vector<float>& adam_m,
                                std::vector<float>& adam_v) {
  const StFile f = read_safetensors(file);
  const TrainState s = parse_state(f.metadata, file);
  std::vector<float> params;
  get_all(f, file, "param.", model, params);
  get_all(f, file, "adam_m.", model, adam_m);
  get_all(f, file, "adam_v.", model, adam_v);
  // Quantizer states: none in a checkpoint of a stateless recipe (or one written before octet saved
  // them), which leaves the model's quantizers fresh; otherwise exactly the model's set.
  std::map<std::string, std::vector<float>> quant;
  for (const auto& [name, t] : f.tensors)
    if (name.rfind("quant.", 0) == 0) {
      OCTET_CHECK(t.shape.size() == 1, file + ": tensor " + name + " must be 1-D");
      quant.emplace(name.substr(6), st_to_f32(t));
    }
  if (!quant.empty()) {
    try {
      model.load_quant_states(quant);
    } catch (const Error& e) {
      OCTET_FAIL(file + ": " + e.what() + " (was it written with another recipe or config?)");
    }
  }
  model.upload_params(params);
  return s;
}

void save_weights(const std::string& path, Model& model, const std::string& tokens_hash,
                  const std::map<std::string, std::string>& meaning) {
  StFile f;
  put_all(f, "", model, model.download_params());
  f.metadata["format"] = "pt";
  if (!tokens_hash.empty()) f.metadata["octet_tokens_hash"] = tokens_hash;
  if (!meaning.empty()) f.metadata["octet_meaning"] = nlohmann::json(meaning).dump();
  write_safetensors(path, f);
}

std::map<std::string, std::string> weights_meaning(const std::string& path) {
  const auto metadata = read_safetensors_metadata(path);
  const auto it = metadata.find("octet_meaning");
  if (it == metadata.end()) return {};
  try {
    return nlohmann::json::parse(it->second).get<std::map<std::string, std::string>>();
  } catch (const nlohmann::json::exception& e) {
    OCTET_FAIL(path + ": corrupt octet_meaning metadata (" + std::string(e.what()) + ")");
  }
}

void load_weights(const std::string& path, Model& model) {
  const StFile f = read_safetensors(path);
  std::vector<float> params;
  get_all(f, path, "", model, params);
  model.upload_params(params);
}

}  // namespace octet
