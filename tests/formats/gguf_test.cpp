// GGUF reader tests: every metadata type and tensor layout round-trips GgufWriter → GgufFile;
// the writer's output and real files (default model, ../shared/testdata/vocab) agree with the
// gguf Python package (tests/formats/gguf_dump.py); bad input throws rz::Error "PATH: cause".
#include "formats/gguf.hpp"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>

#include "formats/common.hpp"
#include "formats/gguf_writer.hpp"
#include "tests/formats/model_test_files.hpp"
#include "tests/test_data.hpp"

namespace rz {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

const std::string kPython = RZ_SOURCE_DIR "/.venv/bin/python";
const std::string kDump = RZ_SOURCE_DIR "/tests/formats/gguf_dump.py";
const std::string kModel = RZ_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
const std::string kVocabDir = RZ_SOURCE_DIR "/../shared/testdata/vocab";

// ---- helpers -----------------------------------------------------------------------------------

// Expects GgufFile::open(path) to throw rz::Error whose one-line message is "PATH: ..." and
// contains `cause`.
void expect_open_error(const std::string& path, const std::string& cause) {
  try {
    GgufFile::open(path);
    ADD_FAILURE() << "no error opening " << path << " (expected '" << cause << "')";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_EQ(m.rfind(path + ": ", 0), 0u) << m;
    EXPECT_NE(m.find(cause), std::string::npos) << "expected '" << cause << "' in: " << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

// Hand-built bytes, for corruptions the writer cannot express.
struct Bytes {
  std::vector<uint8_t> b;
  template <typename T>
  Bytes& put(T v) {
    const size_t n = b.size();
    b.resize(n + sizeof(T));
    std::memcpy(b.data() + n, &v, sizeof(T));
    return *this;
  }
  Bytes& str(std::string_view s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& header(uint64_t n_tensors, uint64_t n_kv) {
    return put<uint32_t>(0x46554747).put<uint32_t>(3).put<uint64_t>(n_tensors).put<uint64_t>(n_kv);
  }
  std::string write(const TempDir& d, const std::string& name) const {
    return d.write(name, std::string(b.begin(), b.end()));
  }
};

// Position-weighted checksum, as gguf_dump.py computes it.
uint64_t checksum(const uint8_t* p, size_t n) {
  uint64_t s = 0;
  for (size_t i = 0; i < n; ++i) s += uint64_t{p[i]} * (i % 65521 + 1);
  return s;
}

std::string hex(const uint8_t* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += d[p[i] >> 4];
    s += d[p[i] & 15];
  }
  return s;
}

// Runs gguf_dump.py on `paths`; fails the test (not skips) without the venv.
std::string run_dump(const std::vector<std::string>& paths) {
  if (!fs::exists(kPython)) {
    ADD_FAILURE() << "missing " << kPython << ": run scripts/setup.sh";
    return {};
  }
  std::string cmd = test::shell_quote(kPython) + " " + test::shell_quote(kDump);
  for (const auto& p : paths) {
    cmd += ' ';
    cmd += test::shell_quote(p);
  }
  auto r = test::run_command(cmd);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.out;
}

// Compares one metadata value with the reference's JSON rendering of it.
void expect_value_eq(const GgufValue& v, simdjson::dom::element j, const std::string& key) {
  SCOPED_TRACE(key);
  switch (v.type) {
    case GgufValueType::UINT8:
    case GgufValueType::UINT16:
    case GgufValueType::UINT32:
    case GgufValueType::UINT64: {
      uint64_t x;
      ASSERT_EQ(j.get_uint64().get(x), simdjson::SUCCESS);
      EXPECT_EQ(std::get<uint64_t>(v.v), x);
      break;
    }
    case GgufValueType::INT8:
    case GgufValueType::INT16:
    case GgufValueType::INT32:
    case GgufValueType::INT64: {
      int64_t x;
      ASSERT_EQ(j.get_int64().get(x), simdjson::SUCCESS);
      EXPECT_EQ(std::get<int64_t>(v.v), x);
      break;
    }
    case GgufValueType::FLOAT32:
    case GgufValueType::FLOAT64: {
      double x;
      ASSERT_EQ(j.get_double().get(x), simdjson::SUCCESS);
      EXPECT_EQ(std::get<double>(v.v), x);  // exact: both sides widen the stored value
      break;
    }
    case GgufValueType::BOOL: {
      bool x;
      ASSERT_EQ(j.get_bool().get(x), simdjson::SUCCESS);
      EXPECT_EQ(std::get<bool>(v.v), x);
      break;
    }
    case GgufValueType::STRING: {
      std::string_view x;
      ASSERT_EQ(j.get_string().get(x), simdjson::SUCCESS);
      EXPECT_EQ(std::get<std::string>(v.v), x);
      break;
    }
    case GgufValueType::ARRAY: {
      simdjson::dom::array a;
      ASSERT_EQ(j.get_array().get(a), simdjson::SUCCESS);
      const auto& items = v.as_array().items;
      ASSERT_EQ(items.size(), a.size());
      size_t i = 0;
      for (auto e : a) {
        expect_value_eq(items[i], e, key + "[" + std::to_string(i) + "]");
        if (::testing::Test::HasFailure()) return;  // one report per array is enough
        ++i;
      }
      break;
    }
  }
}

// Compares everything rz's reader finds in `f` with gguf_dump.py's rendering of the same file.
void expect_matches_reference(const GgufFile& f, simdjson::dom::element ref) {
  SCOPED_TRACE(f.path());
  EXPECT_EQ(int64_t(f.version()), int64_t(ref["version"]));
  EXPECT_EQ(int64_t(f.alignment()), int64_t(ref["alignment"]));
  EXPECT_EQ(int64_t(f.data_offset()), int64_t(ref["data_offset"]));

  simdjson::dom::array meta = ref["metadata"];
  ASSERT_EQ(f.metadata_keys().size(), meta.size());
  size_t i = 0;
  for (auto m : meta) {
    std::string key{std::string_view(m["key"])};
    EXPECT_EQ(f.metadata_keys()[i], key) << "key order";
    const GgufValue* v = f.find(key);
    ASSERT_NE(v, nullptr) << key;
    std::vector<int64_t> types;
    for (auto t : simdjson::dom::array(m["types"])) types.push_back(int64_t(t));
    ASSERT_FALSE(types.empty());
    EXPECT_EQ(int64_t(v->type), types[0]) << key;
    if (v->type == GgufValueType::ARRAY) {
      EXPECT_EQ(int64_t(v->as_array().elem_type), types[1]) << key;
    }
    if (!m["value"].is_null()) expect_value_eq(*v, m["value"], key);
    ++i;
  }

  simdjson::dom::array tens = ref["tensors"];
  ASSERT_EQ(f.tensors().size(), tens.size());
  const TensorView* t0 = nullptr;
  int64_t off0 = 0;
  i = 0;
  for (auto rt : tens) {
    const TensorView& t = f.tensors()[i++];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.name, std::string_view(rt["name"]));
    EXPECT_EQ(int64_t(t.type), int64_t(rt["type"]));
    std::vector<int64_t> shape;
    for (auto d : simdjson::dom::array(rt["shape"])) shape.push_back(int64_t(d));
    EXPECT_EQ(std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims), shape);
    for (int d = t.n_dims; d < 4; ++d) EXPECT_EQ(t.ne[d], 1);
    EXPECT_EQ(int64_t(t.nbytes), int64_t(rt["n_bytes"]));
    const int64_t off = int64_t(rt["offset"]);
    if (!t0) {
      t0 = &t;
      off0 = off;
    }
    EXPECT_EQ(t.data - t0->data, off - off0) << "relative placement";
    EXPECT_EQ(hex(t.data, std::min<size_t>(16, t.nbytes)), std::string_view(rt["head"]));
    EXPECT_EQ(
        hex(t.data + t.nbytes - std::min<size_t>(16, t.nbytes), std::min<size_t>(16, t.nbytes)),
        std::string_view(rt["tail"]));
    EXPECT_EQ(std::to_string(checksum(t.data, t.nbytes)), std::string_view(rt["checksum"]));
  }
}

// A small valid file with metadata and three tensors (used by the corruption tests).
GgufWriter small_file() {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.block_count", 1);
  w.set_string_array("tokenizer.ggml.tokens", {"a", "b", "c"});
  std::vector<float> v(64);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i) * 0.25f;
  w.add_tensor_f32("a.weight", {8, 8}, v);
  w.add_tensor_f32("b.weight", {16}, std::span<const float>(v).first(16));
  std::vector<uint8_t> q8(2 * 34, 7);
  w.add_tensor("c.weight", GgmlType::Q8_0, {32, 2}, q8);
  return w;
}

// ---- round trips -------------------------------------------------------------------------------

TEST(GgufRoundTrip, EveryMetadataType) {
  TempDir d;
  GgufWriter w;
  w.set_u8("t.u8", 250).set_i8("t.i8", -120).set_u16("t.u16", 65000).set_i16("t.i16", -32000);
  w.set_u32("t.u32", 4000000000u).set_i32("t.i32", -2000000000);
  w.set_u64("t.u64", std::numeric_limits<uint64_t>::max())
      .set_i64("t.i64", std::numeric_limits<int64_t>::min());
  w.set_f32("t.f32", 0.1f)
      .set_f64("t.f64", -1e300)
      .set_bool("t.true", true)
      .set_bool("t.false", false);
  w.set_string("t.str", "héllo \"world\"\n\t✓").set_string("t.empty", "");
  w.set_string(std::string("t.nul"), std::string("a\0b", 3));
  w.set_string_array("t.strs", {"<s>", "", "Ġthe", "日本"});
  w.set_i32_array("t.i32s", {1, -2, 3});
  w.set_f32_array("t.f32s", {0.5f, -1.25f, 3e-8f});
  w.set("t.u8s", gguf_array(GgufValueType::UINT8, {gguf_uint(GgufValueType::UINT8, 0),
                                                   gguf_uint(GgufValueType::UINT8, 255)}));
  w.set("t.i64s", gguf_array(GgufValueType::INT64, {gguf_int(GgufValueType::INT64, -5)}));
  w.set("t.f64s",
        gguf_array(GgufValueType::FLOAT64, {gguf_float(GgufValueType::FLOAT64, 1.0 / 3)}));
  w.set("t.bools", gguf_array(GgufValueType::BOOL, {gguf_bool(true), gguf_bool(false)}));
  w.set("t.emptyarr", gguf_array(GgufValueType::UINT32, {}));
  w.set("t.nested",
        gguf_array(GgufValueType::ARRAY,
                   {gguf_array(GgufValueType::INT16, {gguf_int(GgufValueType::INT16, -7)}),
                    gguf_array(GgufValueType::STRING, {gguf_string("x"), gguf_string("yz")})}));
  const std::string path = d.file("meta.gguf");
  w.write(path);

  auto f = GgufFile::open(path);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_TRUE(f->tensors().empty());
  ASSERT_EQ(f->metadata_keys().size(), 24u);
  EXPECT_EQ(f->metadata_keys().front(), "t.u8");
  EXPECT_EQ(f->metadata_keys().back(), "t.nested");
  auto type_of = [&](const char* k) { return f->find(k)->type; };
  EXPECT_EQ(type_of("t.u8"), GgufValueType::UINT8);
  EXPECT_EQ(type_of("t.i8"), GgufValueType::INT8);
  EXPECT_EQ(type_of("t.u16"), GgufValueType::UINT16);
  EXPECT_EQ(type_of("t.i16"), GgufValueType::INT16);
  EXPECT_EQ(type_of("t.u32"), GgufValueType::UINT32);
  EXPECT_EQ(type_of("t.i32"), GgufValueType::INT32);
  EXPECT_EQ(type_of("t.u64"), GgufValueType::UINT64);
  EXPECT_EQ(type_of("t.i64"), GgufValueType::INT64);
  EXPECT_EQ(type_of("t.f32"), GgufValueType::FLOAT32);
  EXPECT_EQ(type_of("t.f64"), GgufValueType::FLOAT64);
  EXPECT_EQ(type_of("t.true"), GgufValueType::BOOL);
  EXPECT_EQ(type_of("t.str"), GgufValueType::STRING);
  EXPECT_EQ(*f->get_int("t.u8"), 250);
  EXPECT_EQ(*f->get_int("t.i8"), -120);
  EXPECT_EQ(*f->get_int("t.u16"), 65000);
  EXPECT_EQ(*f->get_int("t.i16"), -32000);
  EXPECT_EQ(*f->get_int("t.u32"), 4000000000LL);
  EXPECT_EQ(*f->get_int("t.i32"), -2000000000);
  EXPECT_EQ(std::get<uint64_t>(f->find("t.u64")->v), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(*f->get_int("t.i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(*f->get_float("t.f32"), double(0.1f));
  EXPECT_EQ(*f->get_float("t.f64"), -1e300);
  EXPECT_TRUE(*f->get_bool("t.true"));
  EXPECT_FALSE(*f->get_bool("t.false"));
  EXPECT_EQ(*f->get_string("t.str"), "héllo \"world\"\n\t✓");
  EXPECT_EQ(*f->get_string("t.empty"), "");
  EXPECT_EQ(*f->get_string("t.nul"), std::string("a\0b", 3));
  EXPECT_EQ(f->get_string_array("t.strs"), (std::vector<std::string>{"<s>", "", "Ġthe", "日本"}));
  EXPECT_EQ(f->get_int_array("t.i32s"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(f->find("t.i32s")->as_array().elem_type, GgufValueType::INT32);
  EXPECT_EQ(f->get_float_array("t.f32s"), (std::vector<float>{0.5f, -1.25f, 3e-8f}));
  EXPECT_EQ(f->get_int_array("t.u8s"), (std::vector<int64_t>{0, 255}));
  EXPECT_EQ(f->find("t.u8s")->as_array().elem_type, GgufValueType::UINT8);
  EXPECT_EQ(f->get_int_array("t.i64s"), (std::vector<int64_t>{-5}));
  EXPECT_EQ(f->find("t.f64s")->as_array().items[0].as_float(), 1.0 / 3);
  const auto& bools = f->find("t.bools")->as_array();
  ASSERT_EQ(bools.items.size(), 2u);
  EXPECT_TRUE(bools.items[0].as_bool());
  EXPECT_FALSE(bools.items[1].as_bool());
  EXPECT_TRUE(f->find("t.emptyarr")->as_array().items.empty());
  EXPECT_EQ(f->find("t.emptyarr")->as_array().elem_type, GgufValueType::UINT32);
  const auto& nested = f->find("t.nested")->as_array();
  ASSERT_EQ(nested.items.size(), 2u);
  EXPECT_EQ(nested.items[0].as_array().elem_type, GgufValueType::INT16);
  EXPECT_EQ(nested.items[0].as_array().items[0].as_int(), -7);
  EXPECT_EQ(nested.items[1].as_array().items[1].as_string(), "yz");
  // Typed look-ups: absent → nullopt / empty; wrong type → rz::Error naming file and key.
  EXPECT_FALSE(f->get_int("t.absent").has_value());
  EXPECT_TRUE(f->get_string_array("t.absent").empty());
  try {
    f->get_int("t.str");
    ADD_FAILURE() << "string read as an integer";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(path + ": ", 0), 0u) << e.what();
    EXPECT_NE(std::string(e.what()).find("t.str"), std::string::npos) << e.what();
  }
}

TEST(GgufRoundTrip, TensorsAndAlignment) {
  for (uint32_t alignment : {0u, 1u, 8u, 64u, 256u}) {  // 0: no general.alignment key (32)
    SCOPED_TRACE(alignment);
    TempDir d;
    GgufWriter w;
    if (alignment) w.set_alignment(alignment);
    const size_t al = alignment ? alignment : 32;
    std::vector<float> f32(3 * 5);
    for (size_t i = 0; i < f32.size(); ++i) f32[i] = float(i) - 7.5f;
    std::vector<uint8_t> f16(2 * 7 * 3), q8(3 * 34), q4k(2 * 144), bf16(2 * 4);
    for (size_t i = 0; i < f16.size(); ++i) f16[i] = uint8_t(i * 7 + 1);
    for (size_t i = 0; i < q8.size(); ++i) q8[i] = uint8_t(i * 13 + 5);
    for (size_t i = 0; i < q4k.size(); ++i) q4k[i] = uint8_t(i * 31 + 3);
    for (size_t i = 0; i < bf16.size(); ++i) bf16[i] = uint8_t(200 - i);
    w.add_tensor_f32("f32", {5, 3}, f32);
    w.add_tensor("f16", GgmlType::F16, {7, 3}, f16);  // 42 bytes: next offset needs padding
    w.add_tensor("q8_0", GgmlType::Q8_0, {32, 1, 3}, q8);
    w.add_tensor("q4_k", GgmlType::Q4_K, {512}, q4k);
    w.add_tensor("bf16", GgmlType::BF16, {1, 1, 2, 2}, bf16);
    const std::string path = d.file("t.gguf");
    w.write(path);

    auto f = GgufFile::open(path);
    EXPECT_EQ(f->alignment(), al);
    EXPECT_EQ(f->data_offset(), w.data_offset());
    EXPECT_EQ(f->data_offset() % al, 0u);
    ASSERT_EQ(f->tensors().size(), 5u);
    const uint8_t* base = f->tensors()[0].data - (w.tensor_data_offset("f32"));
    struct Want {
      const char* name;
      GgmlType type;
      std::vector<int64_t> ne;
      const uint8_t* bytes;
      size_t n;
    };
    const Want want[] = {
        {"f32",
         GgmlType::F32,
         {5, 3},
         reinterpret_cast<const uint8_t*>(f32.data()),
         f32.size() * 4},
        {"f16", GgmlType::F16, {7, 3}, f16.data(), f16.size()},
        {"q8_0", GgmlType::Q8_0, {32, 1, 3}, q8.data(), q8.size()},
        {"q4_k", GgmlType::Q4_K, {512}, q4k.data(), q4k.size()},
        {"bf16", GgmlType::BF16, {1, 1, 2, 2}, bf16.data(), bf16.size()},
    };
    for (const auto& wt : want) {
      SCOPED_TRACE(wt.name);
      const TensorView* t = f->find_tensor(wt.name);
      ASSERT_NE(t, nullptr);
      EXPECT_EQ(t->type, wt.type);
      EXPECT_EQ(t->n_dims, int(wt.ne.size()));
      for (size_t k = 0; k < 4; ++k) EXPECT_EQ(t->ne[k], k < wt.ne.size() ? wt.ne[k] : 1);
      ASSERT_EQ(t->nbytes, wt.n);
      EXPECT_EQ(std::memcmp(t->data, wt.bytes, wt.n), 0);
      EXPECT_EQ(size_t(t->data - base), w.tensor_data_offset(wt.name));
      EXPECT_EQ((t->data - base - f->data_offset()) % al, 0u);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % std::min<size_t>(al, 4096), 0u);
    }
    EXPECT_EQ(f->find_tensor("absent"), nullptr);
  }
}

TEST(GgufRoundTrip, VersionTwoIsRead) {
  TempDir d;
  GgufWriter w = small_file();
  w.set_version(2);
  w.write(d.file("v2.gguf"));
  auto f = GgufFile::open(d.file("v2.gguf"));
  EXPECT_EQ(f->version(), 2u);
  EXPECT_EQ(f->tensors().size(), 3u);
}

// ---- cross-checks with the gguf Python package ---------------------------------------------

// The writer's output as the reference reader sees it (an independent check of GgufWriter).
TEST(GgufReference, WriterOutputReadsTheSameInPython) {
  TempDir d;
  GgufWriter w = small_file();
  w.set_alignment(64);
  w.set_u8("x.u8", 9).set_i8("x.i8", -9).set_u16("x.u16", 999).set_i16("x.i16", -999);
  w.set_i32("x.i32", -99999).set_u64("x.u64", 1ull << 62).set_i64("x.i64", -(1ll << 62));
  w.set_f32("x.f32", 1.5e-7f).set_f64("x.f64", 2.0 / 3).set_bool("x.bool", true);
  w.set_string("x.str", "ünïcode ✓ \"quoted\"");
  w.set_f32_array("x.f32s", {1.0f, -0.0f, 65504.0f});
  w.set_i32_array("x.i32s", {-1, 0, 1});
  const std::string path = d.file("w.gguf");
  w.write(path);

  std::string out = run_dump({path});
  ASSERT_FALSE(out.empty());
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  ASSERT_EQ(parser.parse(out).get(root), simdjson::SUCCESS) << out.substr(0, 200);
  auto f = GgufFile::open(path);
  expect_matches_reference(*f, root[path]);
  // The reference also sees the values we wrote (not just the values rz reads back).
  simdjson::dom::array meta = root[path]["metadata"];
  std::map<std::string, simdjson::dom::element> by_key;
  for (auto m : meta) by_key[std::string(std::string_view(m["key"]))] = m["value"];
  EXPECT_EQ(int64_t(by_key.at("x.i32")), -99999);
  EXPECT_EQ(uint64_t(by_key.at("x.u64")), 1ull << 62);
  EXPECT_EQ(double(by_key.at("x.f32")), double(1.5e-7f));
  EXPECT_EQ(std::string_view(by_key.at("x.str")), "ünïcode ✓ \"quoted\"");
  EXPECT_EQ(std::string_view(root[path]["tensors"].at(2)["head"]),
            "07070707070707070707070707070707");
}

TEST(GgufReference, RealFilesMatchPython) {
  std::vector<std::string> paths;
  if (fs::exists(kModel))
    paths.push_back(kModel);
  else
    ADD_FAILURE() << "missing " << kModel << ": run scripts/setup.sh";
  if (fs::exists(kVocabDir)) {
    for (const char* n : {"ggml-vocab-gpt-2.gguf", "ggml-vocab-starcoder.gguf",
                          "ggml-vocab-llama-spm.gguf", "ggml-vocab-phi-3.gguf"})
      paths.push_back(kVocabDir + "/" + n);
  } else if (test::check_test_data(kVocabDir) == test::TestData::fail) {
    ADD_FAILURE() << "test data missing (CI=true: a failure, not a skip): " << kVocabDir;
  } else {
    std::cerr << "note: " << kVocabDir << " is absent; vocab files not cross-checked\n";
  }
  if (paths.empty()) GTEST_SKIP() << "no files to compare";
  std::string out = run_dump(paths);
  ASSERT_FALSE(out.empty());
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  ASSERT_EQ(parser.parse(out).get(root), simdjson::SUCCESS);
  for (const auto& p : paths) {
    auto f = GgufFile::open(p);
    EXPECT_GT(f->metadata_keys().size(), 5u) << p;
    expect_matches_reference(*f, root[p]);
  }
}

// ---- bad input ---------------------------------------------------------------------------------

TEST(GgufBadInput, MissingEmptyDirectoryText) {
  TempDir d;
  expect_open_error(d.file("nope.gguf"), "no such file");
  expect_open_error(d.write("empty.gguf", ""), "empty");
  expect_open_error(d.path(), "directory");
  expect_open_error(d.write("text.gguf", "hello, this is a text file and not a model\n"),
                    "not a GGUF file");
  expect_open_error(d.write("short.gguf", "GG"), "not a GGUF file");
  EXPECT_FALSE(GgufFile::looks_like_gguf(d.file("text.gguf")));
  EXPECT_FALSE(GgufFile::looks_like_gguf(d.file("nope.gguf")));
}

TEST(GgufBadInput, BadMagicAndVersion) {
  TempDir d;
  GgufWriter w = small_file();
  w.write(d.file("good.gguf"));
  EXPECT_TRUE(GgufFile::looks_like_gguf(d.file("good.gguf")));
  EXPECT_NO_THROW(GgufFile::open(d.file("good.gguf")));
  w.set_magic(0x46554746);  // "FGUF"
  w.write(d.file("magic.gguf"));
  expect_open_error(d.file("magic.gguf"), "not a GGUF file");
  for (uint32_t v : {0u, 1u, 4u, 0x03000000u}) {
    w.set_magic(0x46554747).set_version(v);
    w.write(d.file("v.gguf"));
    expect_open_error(d.file("v.gguf"), "unsupported GGUF version " + std::to_string(v));
  }
}

// Every proper prefix of a valid file must be rejected with an rz::Error naming the file.
TEST(GgufBadInput, EveryTruncationIsAnError) {
  TempDir d;
  GgufWriter w = small_file();
  const auto bytes = w.bytes();
  const std::string path = d.file("trunc.gguf");
  for (size_t n = 0; n < bytes.size(); ++n) {
    w.write(path, n);
    try {
      GgufFile::open(path);
      ADD_FAILURE() << "prefix of " << n << " of " << bytes.size() << " bytes accepted";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind(path + ": ", 0), 0u) << e.what();
    }
  }
  // The cause is named where the cut falls.
  w.write(path, 20);
  expect_open_error(path, "truncated");  // in the header counts
  w.write(path, 40);
  expect_open_error(path, "truncated");  // in the metadata
  w.write(path, w.data_offset() - 8);
  expect_open_error(path, "truncated");  // in the tensor infos / padding
  w.write(path, w.tensor_data_offset("c.weight") + 10);
  expect_open_error(path, "c.weight");  // in the last tensor's data
  w.write(path, w.tensor_data_offset("c.weight") + 10);
  expect_open_error(path, "past the end");
}

TEST(GgufBadInput, TensorPlacement) {
  TempDir d;
  {
    GgufWriter w = small_file();
    w.override_tensor_offset("b.weight", 0);  // on top of a.weight
    w.write(d.file("overlap.gguf"));
    expect_open_error(d.file("overlap.gguf"), "overlap");
  }
  {
    GgufWriter w = small_file();
    w.override_tensor_offset("b.weight", 32);  // a.weight is 256 bytes from 0
    w.write(d.file("overlap2.gguf"));
    expect_open_error(d.file("overlap2.gguf"), "overlap");
  }
  {
    GgufWriter w = small_file();
    w.override_tensor_offset("a.weight", 1 << 20);
    w.write(d.file("beyond.gguf"));
    expect_open_error(d.file("beyond.gguf"), "a.weight");
    expect_open_error(d.file("beyond.gguf"), "past the end");
  }
  {
    GgufWriter w = small_file();
    w.override_tensor_offset("a.weight", uint64_t(-32));  // aligned, wraps when added
    w.write(d.file("wrap.gguf"));
    expect_open_error(d.file("wrap.gguf"), "past the end");
  }
  {
    GgufWriter w = small_file();
    w.override_tensor_offset("b.weight", 260);
    w.write(d.file("misaligned.gguf"));
    expect_open_error(d.file("misaligned.gguf"), "not aligned");
  }
}

TEST(GgufBadInput, TensorTypesAndShapes) {
  TempDir d;
  auto with = [&](const std::string& name, uint32_t type, std::vector<int64_t> ne, size_t nbytes) {
    GgufWriter w = small_file();
    w.add_tensor_raw("bad.weight", type, std::move(ne), std::vector<uint8_t>(nbytes, 1));
    const std::string p = d.file(name);
    w.write(p);
    return p;
  };
  expect_open_error(with("t99.gguf", 99, {8}, 32), "unknown type 99");
  expect_open_error(with("t4.gguf", 4, {32}, 18), "unknown type 4");  // removed Q4_2
  expect_open_error(with("tbig.gguf", 0xffffffffu, {8}, 32), "unknown type");
  expect_open_error(with("block.gguf", 8, {16}, 17), "not a multiple");  // Q8_0 row of 16
  expect_open_error(with("dims5.gguf", 0, {1, 1, 1, 1, 2}, 8), "dimensions");
  expect_open_error(with("dims0.gguf", 0, {}, 4), "dimensions");
  expect_open_error(with("zero.gguf", 0, {8, 0}, 0), "invalid dimension");
  expect_open_error(with("huge.gguf", 0, {1ll << 40, 1ll << 40}, 4), "invalid dimension");
  {
    GgufWriter w = small_file();
    w.add_tensor_f32("a.weight", {4}, std::vector<float>(4, 1.0f));
    w.write(d.file("dup.gguf"));
    expect_open_error(d.file("dup.gguf"), "duplicate tensor name 'a.weight'");
  }
}

TEST(GgufBadInput, AbsurdCountsDoNotAllocate) {
  TempDir d;
  {
    GgufWriter w = small_file();
    w.override_tensor_count(1ull << 60);
    w.write(d.file("tensors.gguf"));
    expect_open_error(d.file("tensors.gguf"), "tensors");
  }
  {
    GgufWriter w = small_file();
    w.override_kv_count(1ull << 60);
    w.write(d.file("kv.gguf"));
    expect_open_error(d.file("kv.gguf"), "metadata");
  }
  {
    GgufWriter w = small_file();
    w.override_tensor_count(4);  // one more than present: the infos run into the data
    w.write(d.file("tensors4.gguf"));
    expect_open_error(d.file("tensors4.gguf"), "");
  }
  // Array of 2^60 strings, a key of 2^63 bytes, an array of 2^62 arrays.
  Bytes arr;
  arr.header(0, 1).str("big").put<uint32_t>(9).put<uint32_t>(8).put<uint64_t>(1ull << 60).str("x");
  expect_open_error(arr.write(d, "arr.gguf"), "truncated");
  Bytes key;
  key.header(0, 1).put<uint64_t>(1ull << 63).put<uint32_t>(4);
  expect_open_error(key.write(d, "key.gguf"), "truncated");
  Bytes nested;
  nested.header(0, 1).str("n").put<uint32_t>(9).put<uint32_t>(9).put<uint64_t>(1ull << 62);
  expect_open_error(nested.write(d, "nested.gguf"), "truncated");
  Bytes name;
  name.header(1, 0).put<uint64_t>(~0ull);
  expect_open_error(name.write(d, "name.gguf"), "truncated");
}

TEST(GgufBadInput, BadMetadata) {
  TempDir d;
  Bytes type13;
  type13.header(0, 1).str("k").put<uint32_t>(13).put<uint32_t>(0);
  expect_open_error(type13.write(d, "type13.gguf"), "unknown metadata value type 13");
  Bytes arr13;
  arr13.header(0, 1).str("k").put<uint32_t>(9).put<uint32_t>(13).put<uint64_t>(1).put<uint32_t>(0);
  expect_open_error(arr13.write(d, "arr13.gguf"), "unknown metadata array element type 13");
  Bytes badbool;
  badbool.header(0, 1).str("k").put<uint32_t>(7).put<uint8_t>(2);
  expect_open_error(badbool.write(d, "bool.gguf"), "boolean");
  Bytes dup;
  dup.header(0, 2)
      .str("k")
      .put<uint32_t>(4)
      .put<uint32_t>(1)
      .str("k")
      .put<uint32_t>(4)
      .put<uint32_t>(2);
  expect_open_error(dup.write(d, "dup.gguf"), "duplicate metadata key 'k'");
  Bytes deep;  // arrays nested deeper than any real file
  deep.header(0, 1).str("k").put<uint32_t>(9);
  for (int i = 0; i < 64; ++i) deep.put<uint32_t>(9).put<uint64_t>(1);
  deep.put<uint32_t>(4).put<uint64_t>(1).put<uint32_t>(0);
  expect_open_error(deep.write(d, "deep.gguf"), "nested");

  for (uint32_t al : {0u, 48u, 3u}) {
    GgufWriter w = small_file();
    w.set_u32("general.alignment", al);
    w.write(d.file("align.gguf"));
    expect_open_error(d.file("align.gguf"), "general.alignment");
  }
  GgufWriter w = small_file();
  w.set_string("general.alignment", "32");
  w.write(d.file("align_s.gguf"));
  expect_open_error(d.file("align_s.gguf"), "general.alignment");
}

}  // namespace
}  // namespace rz
