// ModelFile::open (see model_file.hpp): picks the format from the path and the file's content,
// reads the config, and checks that every tensor the architecture needs is present with the
// expected shape and a type rz can dequantize.
//
// Safetensors models are presented under GGUF tensor names (hf_to_gguf_name) and GGUF shape
// order; Q/K rows are left as Hugging Face stores them, so their config says rope_neox.
#include "formats/model_file.hpp"

#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "formats/common.hpp"
#include "formats/gguf.hpp"
#include "formats/hf_config.hpp"
#include "formats/safetensors.hpp"

namespace rz {
namespace {

namespace fs = std::filesystem;

std::string shape_str(const std::vector<int64_t>& ne) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < ne.size(); ++i) os << (i ? ", " : "") << ne[i];
  os << "]";
  return os.str();
}

// Every tensor the architecture uses, with its shape in GGUF order; `required` false for the
// optional ones.
struct Expected {
  std::vector<int64_t> ne;
  bool required = true;
};

std::map<std::string, Expected> expected_tensors(const ModelConfig& c) {
  const int64_t E = c.n_embd, V = c.n_vocab, F = c.n_ff;
  const int64_t Q = int64_t{c.n_head} * c.head_dim, KV = int64_t{c.n_head_kv} * c.head_dim;
  std::map<std::string, Expected> m;
  m["token_embd.weight"] = {{E, V}};
  m["output_norm.weight"] = {{E}};
  m["output.weight"] = {{E, V}, !c.tied_embeddings};
  m["rope_freqs.weight"] = {{c.n_rot / 2}, false};  // llama3 frequency divisors (GGUF)
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    m[b + "attn_norm.weight"] = {{E}};
    if (c.fused_qkv_gate_up) {
      m[b + "attn_qkv.weight"] = {{E, Q + 2 * KV}};
      m[b + "ffn_up.weight"] = {{E, 2 * F}};
    } else {
      m[b + "attn_q.weight"] = {{E, Q}};
      m[b + "attn_k.weight"] = {{E, KV}};
      m[b + "attn_v.weight"] = {{E, KV}};
      m[b + "ffn_gate.weight"] = {{E, F}};
      m[b + "ffn_up.weight"] = {{E, F}};
    }
    m[b + "attn_output.weight"] = {{Q, E}};
    m[b + "ffn_norm.weight"] = {{E}};
    if (c.post_norms) {
      m[b + "post_attention_norm.weight"] = {{E}};
      m[b + "post_ffw_norm.weight"] = {{E}};
    }
    m[b + "ffn_down.weight"] = {{F, E}};
    if (c.qk_norm) {
      m[b + "attn_q_norm.weight"] = {{c.head_dim}};
      m[b + "attn_k_norm.weight"] = {{c.head_dim}};
    }
    if (c.qkv_bias) {
      m[b + "attn_q.bias"] = {{Q}};
      m[b + "attn_k.bias"] = {{KV}};
      m[b + "attn_v.bias"] = {{KV}};
    }
  }
  return m;
}

// Throws rz::Error("PATH: ...") naming the first offending tensor.
void check_tensors(const ModelFile& m) {
  const auto expected = expected_tensors(m.config());
  for (const auto& [name, ex] : expected) {
    const TensorView* t = m.find_tensor(name);
    if (!t) {
      if (ex.required) throw file_error(m.path(), "missing tensor '" + name + "'");
      continue;
    }
    std::vector<int64_t> have(t->ne.begin(), t->ne.begin() + t->n_dims);
    if (have != ex.ne)
      throw file_error(m.path(), "tensor '" + name + "' has shape " + shape_str(have) +
                                     ", expected " + shape_str(ex.ne));
    const TypeTraits& tr = type_traits(t->type);
    if (!tr.can_dequantize)
      throw file_error(m.path(),
                       "tensor '" + name + "' has type " +
                           (tr.name.empty() ? std::to_string(static_cast<uint32_t>(t->type))
                                            : std::string(tr.name)) +
                           ", which rz cannot dequantize");
  }
  for (const TensorView& t : m.tensors())
    if (!expected.count(t.name))
      throw file_error(m.path(), "unexpected tensor '" + t.name + "' (" +
                                     arch_name(m.config().arch) +
                                     " models as rz runs them have no such weight)");
}

// The image half of a Gemma 3 image-text checkpoint (its vision tower and projector), which rz
// does not run: it serves the language model.
bool is_vision_tensor(std::string_view name) {
  for (std::string_view p : {"vision_tower.", "model.vision_tower.", "multi_modal_projector.",
                             "model.multi_modal_projector."})
    if (name.starts_with(p)) return true;
  return false;
}

class GgufModel final : public ModelFile {
 public:
  explicit GgufModel(std::shared_ptr<GgufFile> f)
      : f_(std::move(f)), config_(config_from_gguf(*f_)) {}
  const std::string& path() const override { return f_->path(); }
  std::string_view format() const override { return "gguf"; }
  const ModelConfig& config() const override { return config_; }
  const std::vector<TensorView>& tensors() const override { return f_->tensors(); }
  const TensorView* find_tensor(std::string_view name) const override {
    return f_->find_tensor(name);
  }
  std::shared_ptr<const GgufFile> gguf() const override { return f_; }

 private:
  std::shared_ptr<GgufFile> f_;
  ModelConfig config_;
};

class SafetensorsModel final : public ModelFile {
 public:
  // `path` is a .safetensors file or a directory; `dir` holds config.json.
  SafetensorsModel(std::string path, std::string dir)
      : path_(std::move(path)), dir_(std::move(dir)) {
    SafetensorsShards shards;
    if (fs::is_directory(path_))
      shards = find_safetensors_shards(path_);
    else
      shards.files = {path_};
    for (const auto& file : shards.files) {
      files_.push_back(SafetensorsFile::open(file));
      const SafetensorsFile& sf = *files_.back();
      for (const auto& [name, shard] : shards.weight_map)
        if (fs::path(file).filename() == shard && !sf.find_tensor(name))
          throw file_error(
              file, "tensor '" + name + "' listed in model.safetensors.index.json is missing");
    }
    config_ = read_hf_config((fs::path(dir_) / "config.json").string());
    // GGUF names, which depend on the architecture (gemma's norms).
    for (size_t i = 0; i < files_.size(); ++i)
      for (const TensorView& t : files_[i]->tensors()) {
        auto gname = hf_to_gguf_name(t.name, config_.arch);
        if (!gname) {
          if (t.name.ends_with(".rotary_emb.inv_freq")) continue;  // recomputed, never used
          if (config_.arch == Arch::Gemma3 && is_vision_tensor(t.name)) continue;  // text only
          throw file_error(shards.files[i],
                           "unexpected tensor '" + t.name + "' (no GGUF counterpart)");
        }
        if (index_.count(*gname))
          throw file_error(shards.files[i],
                           "tensor '" + t.name + "' appears in more than one file");
        TensorView v = t;
        v.name = *gname;
        index_.emplace(*gname, tensors_.size());
        tensors_.push_back(std::move(v));
      }
  }
  const std::string& path() const override { return path_; }
  std::string_view format() const override { return "safetensors"; }
  const ModelConfig& config() const override { return config_; }
  const std::vector<TensorView>& tensors() const override { return tensors_; }
  const TensorView* find_tensor(std::string_view name) const override {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
  }
  std::string hf_dir() const override { return dir_; }

 private:
  std::string path_, dir_;
  ModelConfig config_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;  // keep the mappings alive
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t, std::less<>> index_;
};

}  // namespace

std::shared_ptr<ModelFile> ModelFile::open(const std::string& path) {
  std::error_code ec;
  std::shared_ptr<ModelFile> m;
  // The GGUF branch and the last one are alike on purpose: the last lets the GGUF reader say why.
  if (fs::is_directory(path, ec)) {
    m = std::make_shared<SafetensorsModel>(path, path);
  } else if (GgufFile::looks_like_gguf(path)) {  // NOLINT(bugprone-branch-clone)
    m = std::make_shared<GgufModel>(GgufFile::open(path));
  } else if (path.ends_with(".safetensors")) {
    fs::path parent = fs::path(path).parent_path();
    m = std::make_shared<SafetensorsModel>(path, parent.empty() ? "." : parent.string());
  } else {
    // Not a directory, no GGUF magic: the GGUF reader says precisely why (missing, empty, ...).
    m = std::make_shared<GgufModel>(GgufFile::open(path));
  }
  check_tensors(*m);
  return m;
}

const TensorView& ModelFile::require(std::string_view gguf_name) const {
  const TensorView* t = find_tensor(gguf_name);
  if (!t) throw file_error(path(), "missing tensor '" + std::string(gguf_name) + "'");
  return *t;
}

}  // namespace rz
