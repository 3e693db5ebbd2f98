// GGUF reader (see gguf.hpp). Layout of a GGUF v2/v3 file, all little-endian:
//
//   "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv    × { string key | u32 value_type | value }
//   n_tensors × { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type | u64 offset }
//   padding to general.alignment (default 32)
//   tensor data: tensor i at data_offset + offset_i (each offset a multiple of the alignment)
//
// string = u64 length | bytes (no terminator); array = u32 elem_type | u64 count | elems.
// Every read is bounds-checked against the mapped length, so a truncated or hostile file gives an
// rz::Error naming the cause, never a crash or a huge allocation.
#include "formats/gguf.hpp"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "formats/common.hpp"

namespace rz {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr int kMaxDims = 4;
constexpr int kMaxArrayDepth = 8;

// Bounds-checked cursor over the mapped file.
class Reader {
 public:
  Reader(const MappedFile& f) : f_(f) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return f_.size() - pos_; }

  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, f_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(const char* what) {
    uint64_t n = read<uint64_t>(what);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(f_.data() + pos_), n);
    pos_ += n;
    return s;
  }

  void need(uint64_t n, const char* what) const {
    if (n > remaining())
      throw file_error(f_.path(), std::string("truncated file: ") + what +
                                      " runs past the end (offset " + std::to_string(pos_) +
                                      ", file size " + std::to_string(f_.size()) + ")");
  }

  [[noreturn]] void fail(const std::string& cause) const { throw file_error(f_.path(), cause); }

 private:
  const MappedFile& f_;
  size_t pos_ = 0;
};

// Smallest number of bytes one value of the type occupies (for sanity-checking counts).
uint64_t min_value_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8:
    case GgufValueType::INT8:
    case GgufValueType::BOOL: return 1;
    case GgufValueType::UINT16:
    case GgufValueType::INT16: return 2;
    case GgufValueType::UINT32:
    case GgufValueType::INT32:
    case GgufValueType::FLOAT32: return 4;
    case GgufValueType::UINT64:
    case GgufValueType::INT64:
    case GgufValueType::FLOAT64:
    case GgufValueType::STRING: return 8;
    case GgufValueType::ARRAY: return 12;
  }
  return 1;
}

bool valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::FLOAT64); }

GgufValue read_value(Reader& r, GgufValueType type, int depth) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufValueType::UINT8: v.v = uint64_t{r.read<uint8_t>("metadata value")}; break;
    case GgufValueType::INT8: v.v = int64_t{r.read<int8_t>("metadata value")}; break;
    case GgufValueType::UINT16: v.v = uint64_t{r.read<uint16_t>("metadata value")}; break;
    case GgufValueType::INT16: v.v = int64_t{r.read<int16_t>("metadata value")}; break;
    case GgufValueType::UINT32: v.v = uint64_t{r.read<uint32_t>("metadata value")}; break;
    case GgufValueType::INT32: v.v = int64_t{r.read<int32_t>("metadata value")}; break;
    case GgufValueType::UINT64: v.v = r.read<uint64_t>("metadata value"); break;
    case GgufValueType::INT64: v.v = r.read<int64_t>("metadata value"); break;
    case GgufValueType::FLOAT32: v.v = double{r.read<float>("metadata value")}; break;
    case GgufValueType::FLOAT64: v.v = r.read<double>("metadata value"); break;
    case GgufValueType::BOOL: {
      uint8_t b = r.read<uint8_t>("metadata value");
      if (b > 1) r.fail("bad boolean value " + std::to_string(b) + " in metadata");
      v.v = b != 0;
      break;
    }
    case GgufValueType::STRING: v.v = r.read_string("metadata string"); break;
    case GgufValueType::ARRAY: {
      if (depth >= kMaxArrayDepth) r.fail("metadata arrays nested too deeply");
      uint32_t et = r.read<uint32_t>("array element type");
      if (!valid_value_type(et))
        r.fail("unknown metadata array element type " + std::to_string(et));
      uint64_t n = r.read<uint64_t>("array length");
      auto elem_type = static_cast<GgufValueType>(et);
      if (n > r.remaining() / min_value_size(elem_type))
        r.fail("truncated file: metadata array of " + std::to_string(n) +
               " elements runs past the end");
      auto arr = std::make_shared<GgufArray>();
      arr->elem_type = elem_type;
      arr->items.reserve(n);
      for (uint64_t i = 0; i < n; ++i) arr->items.push_back(read_value(r, elem_type, depth + 1));
      v.v = std::move(arr);
      break;
    }
  }
  return v;
}

template <typename T>
bool overflows_mul(T a, T b, T& out) {
  return __builtin_mul_overflow(a, b, &out);
}

}  // namespace

// ---- GgufValue -------------------------------------------------------------------------------

bool GgufValue::is_integer() const {
  return std::holds_alternative<uint64_t>(v) || std::holds_alternative<int64_t>(v);
}
bool GgufValue::is_float() const { return std::holds_alternative<double>(v); }

int64_t GgufValue::as_int() const {
  if (auto p = std::get_if<uint64_t>(&v)) return static_cast<int64_t>(*p);
  if (auto p = std::get_if<int64_t>(&v)) return *p;
  if (auto p = std::get_if<bool>(&v)) return *p ? 1 : 0;
  throw Error(std::string("expected an integer, found ") + gguf_value_type_name(type));
}

double GgufValue::as_float() const {
  if (auto p = std::get_if<double>(&v)) return *p;
  if (is_integer()) return static_cast<double>(as_int());
  throw Error(std::string("expected a number, found ") + gguf_value_type_name(type));
}

bool GgufValue::as_bool() const {
  if (auto p = std::get_if<bool>(&v)) return *p;
  if (is_integer()) return as_int() != 0;
  throw Error(std::string("expected a boolean, found ") + gguf_value_type_name(type));
}

const std::string& GgufValue::as_string() const {
  if (auto p = std::get_if<std::string>(&v)) return *p;
  throw Error(std::string("expected a string, found ") + gguf_value_type_name(type));
}

const GgufArray& GgufValue::as_array() const {
  if (auto p = std::get_if<std::shared_ptr<GgufArray>>(&v)) return **p;
  throw Error(std::string("expected an array, found ") + gguf_value_type_name(type));
}

std::string GgufValue::to_display(size_t max_items) const {
  std::ostringstream os;
  if (auto p = std::get_if<uint64_t>(&v))
    os << *p;
  else if (auto p = std::get_if<int64_t>(&v))
    os << *p;
  else if (auto p = std::get_if<double>(&v))
    os << *p;
  else if (auto p = std::get_if<bool>(&v))
    os << (*p ? "true" : "false");
  else if (auto p = std::get_if<std::string>(&v)) {
    std::string s = *p;
    if (s.size() > 80) s = s.substr(0, 77) + "...";
    for (char& c : s)
      if (c == '\n') c = ' ';
    os << '"' << s << '"';
  } else {
    const auto& a = as_array();
    os << "[" << gguf_value_type_name(a.elem_type) << " x " << a.items.size() << "]";
    if (!a.items.empty()) {
      os << " {";
      for (size_t i = 0; i < a.items.size() && i < max_items; ++i)
        os << (i ? ", " : "") << a.items[i].to_display(max_items);
      if (a.items.size() > max_items) os << ", ...";
      os << "}";
    }
  }
  return os.str();
}

const char* gguf_value_type_name(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8: return "u8";
    case GgufValueType::INT8: return "i8";
    case GgufValueType::UINT16: return "u16";
    case GgufValueType::INT16: return "i16";
    case GgufValueType::UINT32: return "u32";
    case GgufValueType::INT32: return "i32";
    case GgufValueType::FLOAT32: return "f32";
    case GgufValueType::BOOL: return "bool";
    case GgufValueType::STRING: return "string";
    case GgufValueType::ARRAY: return "array";
    case GgufValueType::UINT64: return "u64";
    case GgufValueType::INT64: return "i64";
    case GgufValueType::FLOAT64: return "f64";
  }
  return "?";
}

// ---- GgufFile --------------------------------------------------------------------------------

bool GgufFile::looks_like_gguf(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  uint32_t magic = 0;
  bool ok = std::fread(&magic, 4, 1, f) == 1 && magic == kMagic;
  std::fclose(f);
  return ok;
}

std::shared_ptr<GgufFile> GgufFile::open(const std::string& path) {
  std::shared_ptr<GgufFile> g(new GgufFile());
  g->file_ = std::make_unique<MappedFile>(path);
  const MappedFile& mf = *g->file_;
  Reader r(mf);

  if (mf.size() < 4 || r.read<uint32_t>("magic") != kMagic) r.fail("not a GGUF file (bad magic)");
  g->version_ = r.read<uint32_t>("version");
  if (g->version_ != 2 && g->version_ != 3)
    r.fail("unsupported GGUF version " + std::to_string(g->version_) + " (rz reads 2 and 3)");
  uint64_t n_tensors = r.read<uint64_t>("tensor count");
  uint64_t n_kv = r.read<uint64_t>("metadata count");
  // Each key/value takes at least 8 (key length) + 4 (type) + 1 bytes; each tensor info at least
  // 8 + 4 + 4 + 8 bytes. Larger counts cannot fit in the file.
  if (n_kv > r.remaining() / 13)
    r.fail("truncated or corrupt file: header declares " + std::to_string(n_kv) +
           " metadata entries, more than the file can hold");
  if (n_tensors > r.remaining() / 24)
    r.fail("truncated or corrupt file: header declares " + std::to_string(n_tensors) +
           " tensors, more than the file can hold");

  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = r.read_string("metadata key");
    uint32_t t = r.read<uint32_t>("metadata value type");
    if (!valid_value_type(t))
      r.fail("unknown metadata value type " + std::to_string(t) + " for key '" + key + "'");
    GgufValue v = read_value(r, static_cast<GgufValueType>(t), 0);
    if (g->kv_.count(key)) r.fail("duplicate metadata key '" + key + "'");
    g->kv_order_.push_back(key);
    g->kv_.emplace(std::move(key), std::move(v));
  }

  if (const GgufValue* a = g->find("general.alignment")) {
    if (!a->is_integer()) r.fail("general.alignment is not an integer");
    int64_t al = a->as_int();
    if (al <= 0 || (al & (al - 1)) != 0 || al > (1 << 20))
      r.fail("general.alignment " + std::to_string(al) + " is not a power of two");
    g->alignment_ = static_cast<size_t>(al);
  }

  std::vector<uint64_t> offsets;
  g->tensors_.reserve(n_tensors);
  offsets.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorView tv;
    tv.name = r.read_string("tensor name");
    uint32_t n_dims = r.read<uint32_t>("tensor dimension count");
    if (n_dims == 0 || n_dims > kMaxDims)
      r.fail("tensor '" + tv.name + "' has " + std::to_string(n_dims) +
             " dimensions (1 to 4 supported)");
    tv.n_dims = static_cast<int>(n_dims);
    uint64_t n_elems = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne = r.read<uint64_t>("tensor dimension");
      if (ne == 0 || ne > (uint64_t{1} << 40) || overflows_mul(n_elems, ne, n_elems) ||
          n_elems > (uint64_t{1} << 42))
        r.fail("tensor '" + tv.name + "' has an invalid dimension " + std::to_string(ne));
      tv.ne[d] = static_cast<int64_t>(ne);
    }
    uint32_t type = r.read<uint32_t>("tensor type");
    const TypeTraits& tr = type_traits(type);
    if (tr.block_size == 0)
      r.fail("tensor '" + tv.name + "' has unknown type " + std::to_string(type));
    tv.type = static_cast<GgmlType>(type);
    if (tv.ne[0] % tr.block_size != 0)
      r.fail("tensor '" + tv.name + "': row length " + std::to_string(tv.ne[0]) +
             " is not a multiple of the " + std::string(tr.name) + " block size " +
             std::to_string(tr.block_size));
    tv.nbytes = static_cast<size_t>(n_elems / tr.block_size) * tr.type_size;
    uint64_t off = r.read<uint64_t>("tensor offset");
    if (off % g->alignment_ != 0)
      r.fail("tensor '" + tv.name + "' offset " + std::to_string(off) + " is not aligned to " +
             std::to_string(g->alignment_));
    if (g->tensor_index_.count(tv.name)) r.fail("duplicate tensor name '" + tv.name + "'");
    g->tensor_index_.emplace(tv.name, g->tensors_.size());
    g->tensors_.push_back(std::move(tv));
    offsets.push_back(off);
  }

  size_t pos = r.pos();
  g->data_offset_ = (pos + g->alignment_ - 1) / g->alignment_ * g->alignment_;
  if (n_tensors > 0 && g->data_offset_ > mf.size())
    r.fail("truncated file: tensor data section starts past the end");

  // Bounds: every tensor inside the file.
  for (size_t i = 0; i < g->tensors_.size(); ++i) {
    TensorView& tv = g->tensors_[i];
    uint64_t begin = g->data_offset_ + offsets[i];
    if (offsets[i] > mf.size() || begin > mf.size() || tv.nbytes > mf.size() - begin)
      r.fail("truncated file: tensor '" + tv.name + "' (" + std::to_string(tv.nbytes) +
             " bytes at offset " + std::to_string(offsets[i]) + ") runs past the end of the file");
    tv.data = mf.data() + begin;
  }
  // Overlaps: sorted by offset, each must end before the next begins.
  std::vector<size_t> order(g->tensors_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return offsets[a] < offsets[b]; });
  for (size_t k = 1; k < order.size(); ++k) {
    const TensorView& prev = g->tensors_[order[k - 1]];
    const TensorView& cur = g->tensors_[order[k]];
    if (offsets[order[k - 1]] + prev.nbytes > offsets[order[k]])
      r.fail("tensors '" + prev.name + "' and '" + cur.name + "' overlap");
  }
  return g;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_.find(std::string(key));
  return it == kv_.end() ? nullptr : &it->second;
}

namespace {
template <typename F>
auto typed(const GgufFile& f, std::string_view key, F&& get) -> decltype(get(*f.find(key))) {
  const GgufValue* v = f.find(key);
  try {
    return get(*v);
  } catch (const Error& e) {
    throw file_error(f.path(), "metadata key '" + std::string(key) + "': " + e.what());
  }
}
}  // namespace

std::optional<int64_t> GgufFile::get_int(std::string_view key) const {
  if (!find(key)) return std::nullopt;
  return typed(*this, key, [](const GgufValue& v) {
    if (!v.is_integer() && v.type != GgufValueType::BOOL)
      throw Error(std::string("expected an integer, found ") + gguf_value_type_name(v.type));
    return v.as_int();
  });
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  if (!find(key)) return std::nullopt;
  return typed(*this, key, [](const GgufValue& v) { return v.as_float(); });
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  if (!find(key)) return std::nullopt;
  return typed(*this, key, [](const GgufValue& v) { return v.as_bool(); });
}

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
  if (!find(key)) return std::nullopt;
  return typed(*this, key, [](const GgufValue& v) { return v.as_string(); });
}

std::vector<std::string> GgufFile::get_string_array(std::string_view key) const {
  if (!find(key)) return {};
  return typed(*this, key, [](const GgufValue& v) {
    std::vector<std::string> out;
    const auto& a = v.as_array();
    out.reserve(a.items.size());
    for (const auto& it : a.items) out.push_back(it.as_string());
    return out;
  });
}

std::vector<float> GgufFile::get_float_array(std::string_view key) const {
  if (!find(key)) return {};
  return typed(*this, key, [](const GgufValue& v) {
    std::vector<float> out;
    const auto& a = v.as_array();
    out.reserve(a.items.size());
    for (const auto& it : a.items) out.push_back(static_cast<float>(it.as_float()));
    return out;
  });
}

std::vector<int64_t> GgufFile::get_int_array(std::string_view key) const {
  if (!find(key)) return {};
  return typed(*this, key, [](const GgufValue& v) {
    std::vector<int64_t> out;
    const auto& a = v.as_array();
    out.reserve(a.items.size());
    for (const auto& it : a.items) out.push_back(it.as_int());
    return out;
  });
}

const TensorView* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace rz
