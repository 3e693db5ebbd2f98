// ModelFile::open: the default model, tiny random models written as GGUF and as safetensors
// (single file, directory, shards with an index), and the tensor checks (missing, mis-shaped,
// undequantizable, unexpected) with errors naming the file and the tensor.
#include "formats/model_file.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "formats/common.hpp"
#include "formats/gguf.hpp"
#include "tests/formats/model_test_files.hpp"

namespace rz {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using test::TinyDims;
const std::string kModel = RZ_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

void expect_open_error(const std::string& path, const std::string& cause1,
                       const std::string& cause2 = "") {
  try {
    ModelFile::open(path);
    ADD_FAILURE() << "opened " << path << " (expected '" << cause1 << "')";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_NE(m.find(path), std::string::npos) << "path not named: " << m;
    EXPECT_NE(m.find(cause1), std::string::npos) << "expected '" << cause1 << "' in: " << m;
    EXPECT_NE(m.find(cause2), std::string::npos) << "expected '" << cause2 << "' in: " << m;
  }
}

std::vector<int64_t> dims(const TensorView& t) { return {t.ne.begin(), t.ne.begin() + t.n_dims}; }

TEST(ModelFile, DefaultModel) {
  if (!fs::exists(kModel)) FAIL() << "missing " << kModel << ": run scripts/setup.sh";
  auto m = ModelFile::open(kModel);
  EXPECT_EQ(m->format(), "gguf");
  EXPECT_EQ(m->path(), kModel);
  ASSERT_NE(m->gguf(), nullptr);
  EXPECT_EQ(m->hf_dir(), "");
  EXPECT_EQ(m->tensors().size(), m->gguf()->tensors().size());
  EXPECT_EQ(m->tensors().size(), 2u + 9u * 30u);  // embd, output_norm, 9 per layer (tied)
  EXPECT_EQ(m->config().n_layer, 30);
  const TensorView& e = m->require("token_embd.weight");
  EXPECT_EQ(e.type, GgmlType::Q8_0);
  EXPECT_EQ(dims(e), (std::vector<int64_t>{576, 49152}));
  EXPECT_EQ(m->require("blk.29.ffn_down.weight").type, GgmlType::Q4_1);
  EXPECT_EQ(m->require("blk.0.attn_norm.weight").type, GgmlType::F32);
  EXPECT_EQ(m->find_tensor("output.weight"), nullptr);
  try {
    m->require("output.weight");
    ADD_FAILURE();
  } catch (const Error& err) {
    EXPECT_EQ(std::string(err.what()), kModel + ": missing tensor 'output.weight'");
  }
}

TEST(ModelFile, TinyGgufModels) {
  TempDir d;
  TinyDims dm;
  struct Case {
    std::string arch;
    bool tied, bias;
  };
  for (const Case& c : {Case{"llama", false, false}, Case{"llama", true, false},
                        Case{"qwen2", true, true}, Case{"mistral", false, false}}) {
    SCOPED_TRACE(c.arch + (c.tied ? " tied" : "") + (c.bias ? " bias" : ""));
    const std::string p = d.file(c.arch + ".gguf");
    test::tiny_gguf(dm, c.arch, c.tied, c.bias).write(p);
    auto m = ModelFile::open(p);
    EXPECT_EQ(m->format(), "gguf");
    const ModelConfig& cfg = m->config();
    EXPECT_EQ(cfg.n_embd, dm.n_embd);
    EXPECT_EQ(cfg.n_layer, dm.n_layer);
    EXPECT_EQ(cfg.n_head_kv, dm.n_head_kv);
    EXPECT_EQ(cfg.n_vocab, dm.n_vocab);
    EXPECT_EQ(cfg.tied_embeddings, c.tied);
    EXPECT_EQ(cfg.qkv_bias, c.bias);
    EXPECT_EQ(cfg.rope_neox, c.arch == "qwen2");
    EXPECT_EQ(m->tensors().size(), test::tiny_weights(dm, c.tied, c.bias).size());
    EXPECT_EQ(dims(m->require("blk.1.attn_k.weight")), (std::vector<int64_t>{64, 32}));
  }
}

// The tiny llama model (F32 weights) with each weight passed through `edit` first; a weight for
// which `edit` returns false is left out.
template <typename Edit>
GgufWriter tiny_edited(const TinyDims& dm, Edit&& edit) {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  for (const auto& [k, v] : std::vector<std::pair<std::string, uint32_t>>{
           {"llama.context_length", 256},
           {"llama.embedding_length", uint32_t(dm.n_embd)},
           {"llama.block_count", uint32_t(dm.n_layer)},
           {"llama.feed_forward_length", uint32_t(dm.n_ff)},
           {"llama.attention.head_count", uint32_t(dm.n_head)},
           {"llama.attention.head_count_kv", uint32_t(dm.n_head_kv)},
           {"llama.vocab_size", uint32_t(dm.n_vocab)}})
    w.set_u32(k, v);
  w.set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  for (auto s : test::tiny_weights(dm, false, false))
    if (edit(s))
      w.add_tensor_f32(s.gguf_name, s.ne, std::vector<float>(test::n_elements(s.ne), 0.5f));
  return w;
}

// Each broken variant of the tiny model is refused, naming the file and the tensor.
TEST(ModelFile, GgufTensorChecks) {
  TempDir d;
  TinyDims dm;
  const std::string p = d.file("bad.gguf");
  tiny_edited(dm, [](test::WeightSpec&) { return true; }).write(p);
  EXPECT_NO_THROW(ModelFile::open(p));
  // Missing tensors, one at a time.
  for (const auto& spec : test::tiny_weights(dm, false, false)) {
    tiny_edited(dm, [&](test::WeightSpec& s) { return s.gguf_name != spec.gguf_name; }).write(p);
    if (spec.gguf_name == "output.weight") {
      EXPECT_TRUE(ModelFile::open(p)->config().tied_embeddings);  // no output.weight = tied
      continue;
    }
    expect_open_error(p, "missing tensor '" + spec.gguf_name + "'");
  }
  // Wrong shapes.
  tiny_edited(dm, [](test::WeightSpec& s) {
    if (s.gguf_name == "blk.1.ffn_up.weight") std::swap(s.ne[0], s.ne[1]);
    return true;
  }).write(p);
  expect_open_error(p, "blk.1.ffn_up.weight", "has shape [96, 64], expected [64, 96]");
  tiny_edited(dm, [](test::WeightSpec& s) {
    if (s.gguf_name == "output_norm.weight") s.ne = {64, 1};  // 2-D where 1-D is expected
    return true;
  }).write(p);
  expect_open_error(p, "output_norm.weight", "shape");
  // A type rz cannot dequantize, an unexpected tensor, an output bias.
  {
    GgufWriter w = test::tiny_gguf(dm);
    w.add_tensor_raw("rope_freqs.weight", 26 /* I32 */, {8}, std::vector<uint8_t>(32, 0));
    w.write(p);
    expect_open_error(p, "rope_freqs.weight", "I32");
  }
  {
    GgufWriter w = test::tiny_gguf(dm);
    w.add_tensor_f32("blk.0.attn_output.bias", {64}, std::vector<float>(64, 0.0f));
    w.write(p);
    expect_open_error(p, "unexpected tensor 'blk.0.attn_output.bias'");
  }
  {
    GgufWriter w = test::tiny_gguf(dm);
    w.add_tensor_f32("blk.2.attn_norm.weight", {64}, std::vector<float>(64, 0.0f));  // layer 2 of 2
    w.write(p);
    expect_open_error(p, "unexpected tensor 'blk.2.attn_norm.weight'");
  }
  {
    GgufWriter w = test::tiny_gguf(dm);
    w.add_tensor_f32("rope_freqs.weight", {8}, std::vector<float>(8, 1.0f));  // llama3 factors
    w.write(p);
    EXPECT_NE(ModelFile::open(p)->find_tensor("rope_freqs.weight"), nullptr);
  }
  {
    GgufWriter w = test::tiny_gguf(dm, "gpt2");
    w.write(p);
    expect_open_error(p, "unsupported architecture 'gpt2'");
  }
}

TEST(ModelFile, DispatchAndBadPaths) {
  TempDir d;
  expect_open_error(d.file("missing.gguf"), "no such file");
  expect_open_error(d.write("notes.txt", "just some text\n"), "not a GGUF file");
  expect_open_error(d.write("empty.gguf", ""), "empty");
  expect_open_error(d.path(), "no *.safetensors files");  // an empty directory
  expect_open_error(d.file("absent.safetensors"), "absent.safetensors: no such file");
  // GGUF content wins over a misleading extension.
  const std::string odd = d.file("model.safetensors");
  test::tiny_gguf(TinyDims{}).write(odd);
  EXPECT_EQ(ModelFile::open(odd)->format(), "gguf");
}

// The tiny model as safetensors: same tensors under GGUF names, same shapes, same bytes.
TEST(ModelFile, TinySafetensorsModel) {
  TempDir d;
  TinyDims dm;
  const auto entries = test::tiny_safetensors(dm, false, false, 7);
  d.write("config.json", test::tiny_config_json(dm));
  write_safetensors(d.file("model.safetensors"), entries);

  for (const std::string& path : {d.path(), d.file("model.safetensors")}) {
    SCOPED_TRACE(path);
    auto m = ModelFile::open(path);
    EXPECT_EQ(m->format(), "safetensors");
    EXPECT_EQ(m->path(), path);
    EXPECT_EQ(m->hf_dir(), d.path());
    EXPECT_EQ(m->gguf(), nullptr);
    const ModelConfig& c = m->config();
    EXPECT_EQ(c.n_embd, dm.n_embd);
    EXPECT_EQ(c.n_head_kv, dm.n_head_kv);
    EXPECT_TRUE(c.rope_neox);
    EXPECT_FALSE(c.tied_embeddings);
    const auto specs = test::tiny_weights(dm, false, false);
    ASSERT_EQ(m->tensors().size(), specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      const TensorView* t = m->find_tensor(specs[i].gguf_name);
      ASSERT_NE(t, nullptr) << specs[i].gguf_name;
      EXPECT_EQ(t->type, GgmlType::F32);
      EXPECT_EQ(dims(*t), specs[i].ne) << specs[i].gguf_name;
      ASSERT_EQ(t->nbytes, entries[i].data.size());
      EXPECT_EQ(std::memcmp(t->data, entries[i].data.data(), t->nbytes), 0) << specs[i].gguf_name;
    }
  }
}

TEST(ModelFile, ShardedSafetensorsWithIndex) {
  TempDir d;
  TinyDims dm;
  auto entries = test::tiny_safetensors(dm, true, true);
  d.write("config.json", test::tiny_config_json(dm, "qwen2", true));
  const size_t half = entries.size() / 2;
  std::vector<SafetensorsEntry> a(entries.begin(), entries.begin() + half),
      b(entries.begin() + half, entries.end());
  b.push_back(
      {"model.layers.0.self_attn.rotary_emb.inv_freq", "F32", {8}, std::vector<uint8_t>(32, 0)});
  write_safetensors(d.file("model-00001-of-00002.safetensors"), a);
  write_safetensors(d.file("model-00002-of-00002.safetensors"), b);
  std::string idx = "{\"metadata\": {}, \"weight_map\": {";
  for (size_t i = 0; i < entries.size(); ++i)
    idx += (i ? ", \"" : "\"") + entries[i].name + "\": \"model-0000" + (i < half ? "1" : "2") +
           "-of-00002.safetensors\"";
  idx += "}}";
  d.write("model.safetensors.index.json", idx);
  auto m = ModelFile::open(d.path());
  EXPECT_EQ(m->config().arch, Arch::Qwen2);
  EXPECT_TRUE(m->config().qkv_bias);
  EXPECT_TRUE(m->config().tied_embeddings);
  EXPECT_EQ(m->tensors().size(), entries.size());  // inv_freq dropped
  EXPECT_NE(m->find_tensor("blk.1.attn_v.bias"), nullptr);

  // The index names a tensor its shard lacks (model.norm.weight is in the first shard).
  const size_t pos = idx.find("\"model.norm.weight\": \"model-00001");
  ASSERT_NE(pos, std::string::npos);
  idx[pos + std::string("\"model.norm.weight\": \"model-0000").size()] = '2';
  d.write("model.safetensors.index.json", idx);
  expect_open_error(d.path(), "model.norm.weight", "missing");
  fs::remove(d.file("model.safetensors.index.json"));
  EXPECT_NO_THROW(ModelFile::open(d.path()));  // without an index: every *.safetensors
  // The same tensor in two shards.
  write_safetensors(d.file("model-00003-of-00003.safetensors"), {entries[0]});
  expect_open_error(d.path(), "more than one file");
}

TEST(ModelFile, SafetensorsErrors) {
  TempDir d;
  TinyDims dm;
  auto entries = test::tiny_safetensors(dm);
  write_safetensors(d.file("model.safetensors"), entries);
  expect_open_error(d.path(), "config.json", "no such file");
  try {  // the file named in the message is the one that is missing
    ModelFile::open(d.file("model.safetensors"));
    ADD_FAILURE() << "opened without config.json";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), d.file("config.json") + ": no such file");
  }
  d.write("config.json", "{\"model_type\": \"gemma\", \"hidden_size\": 64}");
  expect_open_error(d.path(), "config.json", "unsupported model_type \"gemma\"");
  d.write("config.json", test::tiny_config_json(dm));

  auto with = [&](std::vector<SafetensorsEntry> e) {
    write_safetensors(d.file("model.safetensors"), e);
    return d.path();
  };
  {
    auto e = entries;
    e.push_back(
        {"model.layers.0.self_attn.o_proj.bias", "F32", {64}, std::vector<uint8_t>(256, 0)});
    expect_open_error(with(e), "unexpected tensor 'blk.0.attn_output.bias'");
  }
  {
    auto e = entries;
    e.push_back({"model.vision_tower.weight", "F32", {1}, std::vector<uint8_t>(4, 0)});
    expect_open_error(with(e), "unexpected tensor 'model.vision_tower.weight'");
  }
  {
    auto e = entries;
    for (auto& x : e)
      if (x.name == "model.layers.1.mlp.down_proj.weight") std::swap(x.shape[0], x.shape[1]);
    expect_open_error(with(e), "blk.1.ffn_down.weight", "shape");
  }
  {
    auto e = entries;
    std::erase_if(e, [](const SafetensorsEntry& x) { return x.name == "lm_head.weight"; });
    expect_open_error(with(e), "missing tensor 'output.weight'");  // config says untied
  }
  {
    auto e = entries;
    e[3].dtype = "F64";
    e[3].data.resize(e[3].data.size() * 2);
    expect_open_error(with(e), "dtype F64 is not supported");
  }
}

}  // namespace
}  // namespace rz
