// GGUF v3 writer (see gguf_writer.hpp). Serialises exactly the layout formats/gguf.cpp reads:
// header, metadata, tensor infos, zero padding to the alignment, then each tensor's data at an
// aligned offset (zero padding between tensors).
#include "formats/gguf_writer.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "formats/common.hpp"

namespace rz {
namespace {

class Out {
 public:
  explicit Out(std::vector<uint8_t>& buf) : b_(buf) {}
  template <typename T>
  void put(T v) {
    const size_t n = b_.size();
    b_.resize(n + sizeof(T));
    std::memcpy(b_.data() + n, &v, sizeof(T));
  }
  void put_string(std::string_view s) {
    put<uint64_t>(s.size());
    const size_t n = b_.size();
    b_.resize(n + s.size());
    if (!s.empty()) std::memcpy(b_.data() + n, s.data(), s.size());
  }
  void pad_to(size_t alignment) {
    while (b_.size() % alignment != 0) b_.push_back(0);
  }

 private:
  std::vector<uint8_t>& b_;
};

// Writes the payload of one value of declared type `t` (no type tag).
void put_value(Out& o, GgufValueType t, const GgufValue& v) {
  switch (t) {
    case GgufValueType::UINT8: o.put<uint8_t>(static_cast<uint8_t>(v.as_int())); break;
    case GgufValueType::INT8: o.put<int8_t>(static_cast<int8_t>(v.as_int())); break;
    case GgufValueType::UINT16: o.put<uint16_t>(static_cast<uint16_t>(v.as_int())); break;
    case GgufValueType::INT16: o.put<int16_t>(static_cast<int16_t>(v.as_int())); break;
    case GgufValueType::UINT32: o.put<uint32_t>(static_cast<uint32_t>(v.as_int())); break;
    case GgufValueType::INT32: o.put<int32_t>(static_cast<int32_t>(v.as_int())); break;
    case GgufValueType::UINT64: o.put<uint64_t>(static_cast<uint64_t>(v.as_int())); break;
    case GgufValueType::INT64: o.put<int64_t>(v.as_int()); break;
    case GgufValueType::FLOAT32: o.put<float>(static_cast<float>(v.as_float())); break;
    case GgufValueType::FLOAT64: o.put<double>(v.as_float()); break;
    case GgufValueType::BOOL: o.put<uint8_t>(v.as_bool() ? 1 : 0); break;
    case GgufValueType::STRING: o.put_string(v.as_string()); break;
    case GgufValueType::ARRAY: {
      const GgufArray& a = v.as_array();
      o.put<uint32_t>(static_cast<uint32_t>(a.elem_type));
      o.put<uint64_t>(a.items.size());
      for (const auto& item : a.items) put_value(o, a.elem_type, item);
      break;
    }
  }
}

bool is_power_of_two(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

}  // namespace

// ---- value helpers -----------------------------------------------------------------------------

GgufValue gguf_uint(GgufValueType t, uint64_t v) { return GgufValue{t, v}; }
GgufValue gguf_int(GgufValueType t, int64_t v) { return GgufValue{t, v}; }
GgufValue gguf_float(GgufValueType t, double v) { return GgufValue{t, v}; }
GgufValue gguf_bool(bool v) { return GgufValue{GgufValueType::BOOL, v}; }
GgufValue gguf_string(std::string v) { return GgufValue{GgufValueType::STRING, std::move(v)}; }
GgufValue gguf_array(GgufValueType elem_type, std::vector<GgufValue> items) {
  auto a = std::make_shared<GgufArray>();
  a->elem_type = elem_type;
  a->items = std::move(items);
  return GgufValue{GgufValueType::ARRAY, std::move(a)};
}

// ---- metadata ----------------------------------------------------------------------------------

GgufWriter& GgufWriter::set(const std::string& key, GgufValue v) {
  for (auto& [k, old] : kv_)
    if (k == key) {
      old = std::move(v);
      return *this;
    }
  kv_.emplace_back(key, std::move(v));
  return *this;
}

GgufWriter& GgufWriter::set_u8(const std::string& k, uint8_t v) {
  return set(k, gguf_uint(GgufValueType::UINT8, v));
}
GgufWriter& GgufWriter::set_i8(const std::string& k, int8_t v) {
  return set(k, gguf_int(GgufValueType::INT8, v));
}
GgufWriter& GgufWriter::set_u16(const std::string& k, uint16_t v) {
  return set(k, gguf_uint(GgufValueType::UINT16, v));
}
GgufWriter& GgufWriter::set_i16(const std::string& k, int16_t v) {
  return set(k, gguf_int(GgufValueType::INT16, v));
}
GgufWriter& GgufWriter::set_u32(const std::string& k, uint32_t v) {
  return set(k, gguf_uint(GgufValueType::UINT32, v));
}
GgufWriter& GgufWriter::set_i32(const std::string& k, int32_t v) {
  return set(k, gguf_int(GgufValueType::INT32, v));
}
GgufWriter& GgufWriter::set_u64(const std::string& k, uint64_t v) {
  return set(k, gguf_uint(GgufValueType::UINT64, v));
}
GgufWriter& GgufWriter::set_i64(const std::string& k, int64_t v) {
  return set(k, gguf_int(GgufValueType::INT64, v));
}
GgufWriter& GgufWriter::set_f32(const std::string& k, float v) {
  return set(k, gguf_float(GgufValueType::FLOAT32, v));
}
GgufWriter& GgufWriter::set_f64(const std::string& k, double v) {
  return set(k, gguf_float(GgufValueType::FLOAT64, v));
}
GgufWriter& GgufWriter::set_bool(const std::string& k, bool v) { return set(k, gguf_bool(v)); }
GgufWriter& GgufWriter::set_string(const std::string& k, std::string v) {
  return set(k, gguf_string(std::move(v)));
}

GgufWriter& GgufWriter::set_string_array(const std::string& key,
                                         const std::vector<std::string>& v) {
  std::vector<GgufValue> items;
  items.reserve(v.size());
  for (const auto& s : v) items.push_back(gguf_string(s));
  return set(key, gguf_array(GgufValueType::STRING, std::move(items)));
}

GgufWriter& GgufWriter::set_i32_array(const std::string& key, const std::vector<int32_t>& v) {
  std::vector<GgufValue> items;
  items.reserve(v.size());
  for (int32_t x : v) items.push_back(gguf_int(GgufValueType::INT32, x));
  return set(key, gguf_array(GgufValueType::INT32, std::move(items)));
}

GgufWriter& GgufWriter::set_f32_array(const std::string& key, const std::vector<float>& v) {
  std::vector<GgufValue> items;
  items.reserve(v.size());
  for (float x : v) items.push_back(gguf_float(GgufValueType::FLOAT32, x));
  return set(key, gguf_array(GgufValueType::FLOAT32, std::move(items)));
}

size_t GgufWriter::alignment() const {
  for (const auto& [k, v] : kv_)
    if (k == "general.alignment" && v.is_integer() && v.as_int() > 0 &&
        is_power_of_two(static_cast<uint64_t>(v.as_int())))
      return static_cast<size_t>(v.as_int());
  return 32;
}

// ---- tensors -----------------------------------------------------------------------------------

namespace {

// Bytes a tensor of this type and shape needs; throws rz::Error for a bad type or shape.
size_t checked_size(const std::string& name, GgmlType type, const std::vector<int64_t>& ne) {
  const TypeTraits& tr = type_traits(type);
  if (tr.block_size == 0) throw Error("GgufWriter: tensor '" + name + "': unknown type");
  if (ne.empty() || ne.size() > 4)
    throw Error("GgufWriter: tensor '" + name + "': 1 to 4 dimensions expected");
  int64_t n = 1;
  for (int64_t d : ne) {
    if (d <= 0) throw Error("GgufWriter: tensor '" + name + "': dimensions must be positive");
    n *= d;
  }
  if (ne[0] % tr.block_size != 0)
    throw Error("GgufWriter: tensor '" + name + "': ne[0] not a multiple of the block size");
  return static_cast<size_t>(n / tr.block_size) * tr.type_size;
}

}  // namespace

GgufWriter& GgufWriter::add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne,
                                   std::span<const uint8_t> data) {
  const size_t want = checked_size(name, type, ne);
  if (data.size() != want)
    throw Error("GgufWriter: tensor '" + name + "': " + std::to_string(data.size()) +
                " bytes given, " + std::to_string(want) + " needed");
  return add_tensor_raw(name, static_cast<uint32_t>(type), std::move(ne),
                        std::vector<uint8_t>(data.begin(), data.end()));
}

GgufWriter& GgufWriter::add_tensor_streamed(const std::string& name, GgmlType type,
                                            std::vector<int64_t> ne, TensorProducer produce) {
  const size_t size = checked_size(name, type, ne);
  Tensor t{name,         static_cast<uint32_t>(type), std::move(ne), {},
           std::nullopt, std::move(produce),          size};
  tensors_.push_back(std::move(t));
  return *this;
}

GgufWriter& GgufWriter::add_tensor_f32(const std::string& name, std::vector<int64_t> ne,
                                       std::span<const float> data) {
  auto bytes = std::as_bytes(data);
  return add_tensor(
      name, GgmlType::F32, std::move(ne),
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
}

GgufWriter& GgufWriter::add_tensor_raw(const std::string& name, uint32_t type,
                                       std::vector<int64_t> ne, std::vector<uint8_t> data) {
  const size_t size = data.size();
  tensors_.push_back(
      Tensor{name, type, std::move(ne), std::move(data), std::nullopt, nullptr, size});
  return *this;
}

GgufWriter& GgufWriter::override_tensor_offset(const std::string& name, uint64_t offset) {
  tensor(name).offset_override = offset;
  return *this;
}

GgufWriter::Tensor& GgufWriter::tensor(const std::string& name) {
  for (auto& t : tensors_)
    if (t.name == name) return t;
  throw Error("GgufWriter: no tensor '" + name + "'");
}

const GgufWriter::Tensor& GgufWriter::tensor(const std::string& name) const {
  return const_cast<GgufWriter*>(this)->tensor(name);
}

// ---- output ------------------------------------------------------------------------------------

std::vector<uint64_t> GgufWriter::relative_offsets() const {
  const size_t al = alignment();
  std::vector<uint64_t> offs;
  uint64_t pos = 0;
  for (const auto& t : tensors_) {
    offs.push_back(pos);
    pos = (pos + t.size + al - 1) / al * al;
  }
  return offs;
}

std::vector<uint8_t> GgufWriter::header_bytes() const {
  const auto offs = relative_offsets();
  std::vector<uint8_t> buf;
  Out o(buf);
  o.put<uint32_t>(magic_);
  o.put<uint32_t>(version_);
  o.put<uint64_t>(tensor_count_.value_or(tensors_.size()));
  o.put<uint64_t>(kv_count_.value_or(kv_.size()));
  for (const auto& [k, v] : kv_) {
    o.put_string(k);
    o.put<uint32_t>(static_cast<uint32_t>(v.type));
    put_value(o, v.type, v);
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    o.put_string(t.name);
    o.put<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) o.put<uint64_t>(static_cast<uint64_t>(d));
    o.put<uint32_t>(t.type);
    o.put<uint64_t>(t.offset_override.value_or(offs[i]));
  }
  o.pad_to(alignment());
  return buf;
}

size_t GgufWriter::data_offset() const { return header_bytes().size(); }

size_t GgufWriter::tensor_data_offset(const std::string& name) const {
  auto offs = relative_offsets();
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (tensors_[i].name == name) return data_offset() + offs[i];
  throw Error("GgufWriter: no tensor '" + name + "'");
}

void GgufWriter::emit(size_t i, const ByteSink& sink) const {
  const Tensor& t = tensors_[i];
  if (!t.producer) {
    sink(t.data.data(), t.data.size());
    return;
  }
  size_t got = 0;
  t.producer([&](const uint8_t* p, size_t n) {
    if (got + n > t.size)
      throw Error("GgufWriter: tensor '" + t.name + "': producer gave more than " +
                  std::to_string(t.size) + " bytes");
    got += n;
    sink(p, n);
  });
  if (got != t.size)
    throw Error("GgufWriter: tensor '" + t.name + "': producer gave " + std::to_string(got) +
                " bytes, " + std::to_string(t.size) + " needed");
}

std::vector<uint8_t> GgufWriter::bytes() const {
  const auto offs = relative_offsets();
  std::vector<uint8_t> buf = header_bytes();
  const size_t base = buf.size();
  for (size_t i = 0; i < tensors_.size(); ++i) {
    buf.resize(base + offs[i], 0);  // zero padding up to this tensor's aligned offset
    emit(i, [&](const uint8_t* p, size_t n) { buf.insert(buf.end(), p, p + n); });
  }
  return buf;
}

// Streams header and tensors to the file (no second copy of the tensor data in memory).
void GgufWriter::write(const std::string& path, std::optional<size_t> truncate_to) const {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw file_error(path, std::string("cannot create: ") + std::strerror(errno));
  size_t left = truncate_to.value_or(SIZE_MAX);
  bool ok = true;
  auto put = [&](const uint8_t* p, size_t n) {
    n = std::min(n, left);
    if (n > 0) ok = ok && std::fwrite(p, 1, n, f) == n;
    left -= n;
  };
  const std::vector<uint8_t> header = header_bytes();
  put(header.data(), header.size());
  const auto offs = relative_offsets();
  const std::vector<uint8_t> zeros(alignment(), 0);
  uint64_t pos = 0;  // relative to the data section
  for (size_t i = 0; i < tensors_.size(); ++i) {
    put(zeros.data(), static_cast<size_t>(offs[i] - pos));
    try {
      emit(i, put);
    } catch (...) {
      std::fclose(f);
      throw;
    }
    pos = offs[i] + tensors_[i].size;
  }
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) throw file_error(path, "write failed");
}

}  // namespace rz
