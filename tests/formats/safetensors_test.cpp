// safetensors reader tests: files written by the reference `safetensors` package
// (tests/golden/make_safetensors_golden.py), round trips through rz's writer, HF → GGUF names,
// shard discovery, and malformed files (rz::Error "PATH: cause").
#include "formats/safetensors.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "formats/common.hpp"
#include "tests/formats/model_test_files.hpp"

namespace rz {
namespace {

using test::TempDir;
const std::string kGoldenDir = RZ_SOURCE_DIR "/tests/golden";

void expect_open_error(const std::string& path, const std::string& cause) {
  try {
    SafetensorsFile::open(path);
    ADD_FAILURE() << "no error opening " << path << " (expected '" << cause << "')";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_EQ(m.rfind(path + ": ", 0), 0u) << m;
    EXPECT_NE(m.find(cause), std::string::npos) << "expected '" << cause << "' in: " << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

std::vector<int64_t> dims(const TensorView& t) { return {t.ne.begin(), t.ne.begin() + t.n_dims}; }

template <typename T>
std::vector<T> values(const TensorView& t) {
  std::vector<T> v(t.nbytes / sizeof(T));
  std::memcpy(v.data(), t.data, t.nbytes);
  return v;
}

// A header + data file made by hand.
std::string raw_file(const TempDir& d, const std::string& name, const std::string& header,
                     size_t data_bytes, std::optional<uint64_t> hlen = std::nullopt) {
  std::string s(8, '\0');
  uint64_t n = hlen.value_or(header.size());
  std::memcpy(s.data(), &n, 8);
  s += header;
  s += std::string(data_bytes, '\x01');
  return d.write(name, s);
}

TEST(Safetensors, ReadsReferencePackageOutput) {
  auto f = SafetensorsFile::open(kGoldenDir + "/tiny.safetensors");
  ASSERT_EQ(f->tensors().size(), 4u);  // __metadata__ is not a tensor
  const TensorView* a = f->find_tensor("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->type, GgmlType::F32);
  EXPECT_EQ(dims(*a), (std::vector<int64_t>{3, 2}));  // [2, 3] row-major → ne {3, 2}
  EXPECT_EQ(a->rows(), 2);
  EXPECT_EQ(values<float>(*a), (std::vector<float>{0, 0.5f, 1, 1.5f, 2, 2.5f}));
  const TensorView* b = f->find_tensor("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->type, GgmlType::F16);
  EXPECT_EQ(dims(*b), (std::vector<int64_t>{4}));
  EXPECT_EQ(values<uint16_t>(*b), (std::vector<uint16_t>{0x3c00, 0xc000, 0x3800, 0x7bff}));
  const TensorView* s = f->find_tensor("scalar");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->n_dims, 0);
  EXPECT_EQ(s->n_elements(), 1);
  EXPECT_EQ(values<float>(*s), (std::vector<float>{7.0f}));
  const TensorView* u = f->find_tensor("model.layers.0.mlp.up_proj.weight");
  ASSERT_NE(u, nullptr);
  EXPECT_EQ(dims(*u), (std::vector<int64_t>{2, 2, 3}));
  EXPECT_EQ(values<float>(*u), std::vector<float>(12, -1.5f));
  EXPECT_EQ(f->find_tensor("__metadata__"), nullptr);

  auto g = SafetensorsFile::open(kGoldenDir + "/tiny_bf16.safetensors");
  const TensorView* c = g->find_tensor("c");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->type, GgmlType::BF16);
  EXPECT_EQ(dims(*c), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(values<uint16_t>(*c), (std::vector<uint16_t>{0x3f80, 0xbf80, 0x4049, 0x0000}));
  EXPECT_EQ(values<float>(*g->find_tensor("d")), std::vector<float>(3, 1.0f));

  expect_open_error(kGoldenDir + "/tiny_i64.safetensors", "dtype I64 is not supported");
}

TEST(Safetensors, WriterRoundTripAndByteLayout) {
  TempDir d;
  std::vector<SafetensorsEntry> e = {
      {"x", "F32", {2, 2}, std::vector<uint8_t>(16, 3)},
      {"y \"quoted\"", "BF16", {3}, {1, 2, 3, 4, 5, 6}},
      {"z", "F16", {1, 1, 1, 2}, {9, 9, 8, 8}},
  };
  const std::string p = d.file("w.safetensors");
  write_safetensors(p, e, {{"format", "pt"}});
  auto f = SafetensorsFile::open(p);
  ASSERT_EQ(f->tensors().size(), 3u);
  EXPECT_EQ(f->data_offset() % 8, 0u);
  for (const auto& want : e) {
    const TensorView* t = f->find_tensor(want.name);
    ASSERT_NE(t, nullptr) << want.name;
    std::vector<int64_t> ne(want.shape.rbegin(), want.shape.rend());
    EXPECT_EQ(dims(*t), ne);
    ASSERT_EQ(t->nbytes, want.data.size());
    EXPECT_EQ(std::memcmp(t->data, want.data.data(), t->nbytes), 0);
  }
}

TEST(Safetensors, MalformedFiles) {
  TempDir d;
  expect_open_error(d.file("missing.safetensors"), "no such file");
  expect_open_error(d.write("empty.safetensors", ""), "empty");
  expect_open_error(d.write("short.safetensors", "abc"), "not a safetensors file");
  expect_open_error(d.write("text.safetensors", "this is plain text, not a model file at all\n"),
                    "not a safetensors file");
  const std::string ok = R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_NO_THROW(SafetensorsFile::open(raw_file(d, "ok.safetensors", ok, 8)));
  expect_open_error(raw_file(d, "hlen.safetensors", ok, 8, 1000), "truncated");
  expect_open_error(raw_file(d, "hhuge.safetensors", ok, 8, 1ull << 62), "header length");
  expect_open_error(raw_file(d, "json.safetensors", "{\"t\": [", 8), "not valid JSON");
  expect_open_error(raw_file(d, "arr.safetensors", "[1,2]", 8), "not a JSON object");
  expect_open_error(raw_file(d, "entry.safetensors", R"({"t": 5})", 8), "tensor 't'");
  expect_open_error(
      raw_file(d, "nodtype.safetensors", R"({"t":{"shape":[2],"data_offsets":[0,8]}})", 8),
      "dtype");
  for (const char* dt : {"I64", "F64", "U8", "I8", "BOOL", "F8_E4M3"})
    expect_open_error(
        raw_file(d, "dt.safetensors",
                 std::string(R"({"t":{"dtype":")") + dt + R"(","shape":[1],"data_offsets":[0,8]}})",
                 8),
        std::string("dtype ") + dt + " is not supported");
  expect_open_error(raw_file(d, "neg.safetensors",
                             R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
                    "shape");
  expect_open_error(raw_file(d, "flt.safetensors",
                             R"({"t":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", 8),
                    "shape");
  expect_open_error(
      raw_file(d, "dims.safetensors",
               R"({"t":{"dtype":"F32","shape":[1,1,1,1,2],"data_offsets":[0,8]}})", 8),
      "5 dimensions");
  expect_open_error(raw_file(d, "size.safetensors",
                             R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 16),
                    "do not match");
  expect_open_error(raw_file(d, "order.safetensors",
                             R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8),
                    "data_offsets");
  expect_open_error(
      raw_file(d, "offs.safetensors", R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8),
      "data_offsets");
  expect_open_error(raw_file(d, "past.safetensors",
                             R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 7),
                    "past the end");
  expect_open_error(
      raw_file(d, "past2.safetensors",
               R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[18446744073709551608,0]}})", 8),
      "data_offsets");
  expect_open_error(
      raw_file(d, "huge.safetensors",
               R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8),
      "too large");
  expect_open_error(
      raw_file(
          d, "overlap.safetensors",
          R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"u":{"dtype":"F16","shape":[2],"data_offsets":[6,10]}})",
          10),
      "overlap");
  expect_open_error(
      raw_file(
          d, "dup.safetensors",
          R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
          8),
      "twice");
  // Every truncation of a valid file is an error.
  std::vector<uint8_t> good = safetensors_bytes(test::tiny_safetensors(test::TinyDims{}));
  for (size_t n = 0; n < good.size(); n += (n < 600 ? 1 : 997)) {
    const std::string p = d.write("cut.safetensors", std::string(good.begin(), good.begin() + n));
    try {
      SafetensorsFile::open(p);
      ADD_FAILURE() << "prefix of " << n << " bytes accepted";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind(p + ": ", 0), 0u) << e.what();
    }
  }
}

TEST(Safetensors, HfToGgufNames) {
  const std::pair<const char*, const char*> cases[] = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"},
      {"model.layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight"},
      {"model.layers.12.self_attn.k_proj.weight", "blk.12.attn_k.weight"},
      {"model.layers.3.self_attn.v_proj.bias", "blk.3.attn_v.bias"},
      {"model.layers.3.self_attn.q_proj.bias", "blk.3.attn_q.bias"},
      {"model.layers.7.self_attn.o_proj.weight", "blk.7.attn_output.weight"},
      {"model.layers.7.self_attn.o_proj.bias", "blk.7.attn_output.bias"},
      {"model.layers.99.mlp.gate_proj.weight", "blk.99.ffn_gate.weight"},
      {"model.layers.1.mlp.up_proj.weight", "blk.1.ffn_up.weight"},
      {"model.layers.1.mlp.down_proj.weight", "blk.1.ffn_down.weight"},
      {"model.layers.5.input_layernorm.weight", "blk.5.attn_norm.weight"},
      {"model.layers.5.post_attention_layernorm.weight", "blk.5.ffn_norm.weight"},
  };
  for (const auto& [hf, gg] : cases) {
    auto got = hf_to_gguf_name(hf);
    ASSERT_TRUE(got.has_value()) << hf;
    EXPECT_EQ(*got, gg) << hf;
  }
  for (const char* n :
       {"model.layers.0.self_attn.rotary_emb.inv_freq", "model.layers.x.mlp.up_proj.weight",
        "model.layers.01.mlp.up_proj.weight", "model.layers.1.mlp.up_proj",
        "model.layers..mlp.up_proj.weight", "model.layers.1", "layers.1.mlp.up_proj.weight",
        "model.embed_tokens.bias", "lm_head.bias", "model.layers.1.mlp.up_proj.weight.x", "",
        "token_embd.weight"})
    EXPECT_FALSE(hf_to_gguf_name(n).has_value()) << n;
  // Gemma 3: its four norms, and the language model of an image-text checkpoint under either
  // prefix transformers has written.
  const std::pair<const char*, const char*> gemma[] = {
      {"model.layers.2.post_attention_layernorm.weight", "blk.2.post_attention_norm.weight"},
      {"model.layers.2.pre_feedforward_layernorm.weight", "blk.2.ffn_norm.weight"},
      {"model.layers.2.post_feedforward_layernorm.weight", "blk.2.post_ffw_norm.weight"},
      {"model.layers.2.self_attn.q_norm.weight", "blk.2.attn_q_norm.weight"},
      {"model.language_model.layers.2.mlp.up_proj.weight", "blk.2.ffn_up.weight"},
      {"language_model.model.layers.2.mlp.up_proj.weight", "blk.2.ffn_up.weight"},
      {"model.language_model.embed_tokens.weight", "token_embd.weight"},
      {"language_model.lm_head.weight", "output.weight"},
  };
  for (const auto& [hf, gg] : gemma) EXPECT_EQ(hf_to_gguf_name(hf, Arch::Gemma3), gg) << hf;
  EXPECT_EQ(hf_to_gguf_name("model.layers.2.post_attention_layernorm.weight"),
            "blk.2.ffn_norm.weight");  // Llama's meaning of the name
  EXPECT_FALSE(hf_to_gguf_name("model.language_model.layers.2.mlp.up_proj.weight").has_value());
  EXPECT_FALSE(hf_to_gguf_name("model.vision_tower.x.weight", Arch::Gemma3).has_value());
}

TEST(Safetensors, ShardDiscovery) {
  TempDir d;
  try {
    find_safetensors_shards(d.path());
    ADD_FAILURE() << "empty directory accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), d.path() + ": no *.safetensors files in the directory");
  }
  d.write("model-00002-of-00002.safetensors", "");
  d.write("model-00001-of-00002.safetensors", "");
  d.write("notes.txt", "");
  auto s = find_safetensors_shards(d.path());
  EXPECT_EQ(s.files, (std::vector<std::string>{d.file("model-00001-of-00002.safetensors"),
                                               d.file("model-00002-of-00002.safetensors")}));
  EXPECT_TRUE(s.weight_map.empty());
  d.write(
      "model.safetensors.index.json",
      R"({"metadata": {"total_size": 8}, "weight_map": {"a": "model-00002-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})");
  s = find_safetensors_shards(d.path());
  EXPECT_EQ(s.files, (std::vector<std::string>{d.file("model-00002-of-00002.safetensors")}));
  EXPECT_EQ(s.weight_map.size(), 2u);
  EXPECT_EQ(s.weight_map.at("a"), "model-00002-of-00002.safetensors");
  d.write("model.safetensors.index.json", R"({"weight_map": {"a": "../evil.safetensors"}})");
  EXPECT_THROW(find_safetensors_shards(d.path()), Error);
  d.write("model.safetensors.index.json", R"({"weight_map": 3})");
  EXPECT_THROW(find_safetensors_shards(d.path()), Error);
}

}  // namespace
}  // namespace rz
