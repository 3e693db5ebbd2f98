// GGUF v3 writer: builds a complete file in memory (metadata of every value type, tensor infos,
// alignment padding, tensor data) and writes it out. Used by tests to craft good and deliberately
// broken files, and by `rz synth` to write synthetic models. The layout it writes is the one
// described at the top of formats/gguf.cpp; general.alignment, when set, is honoured.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "formats/ggml_types.hpp"
#include "formats/gguf.hpp"

namespace rz {

class GgufWriter {
 public:
  GgufWriter() = default;

  // ---- metadata (kept in insertion order; setting an existing key replaces its value) -------
  GgufWriter& set(const std::string& key, GgufValue v);
  GgufWriter& set_u8(const std::string& key, uint8_t v);
  GgufWriter& set_i8(const std::string& key, int8_t v);
  GgufWriter& set_u16(const std::string& key, uint16_t v);
  GgufWriter& set_i16(const std::string& key, int16_t v);
  GgufWriter& set_u32(const std::string& key, uint32_t v);
  GgufWriter& set_i32(const std::string& key, int32_t v);
  GgufWriter& set_u64(const std::string& key, uint64_t v);
  GgufWriter& set_i64(const std::string& key, int64_t v);
  GgufWriter& set_f32(const std::string& key, float v);
  GgufWriter& set_f64(const std::string& key, double v);
  GgufWriter& set_bool(const std::string& key, bool v);
  GgufWriter& set_string(const std::string& key, std::string v);
  GgufWriter& set_string_array(const std::string& key, const std::vector<std::string>& v);
  GgufWriter& set_i32_array(const std::string& key, const std::vector<int32_t>& v);
  GgufWriter& set_f32_array(const std::string& key, const std::vector<float>& v);
  // Alignment of tensor data, stored as general.alignment (u32). The writer pads with whatever
  // general.alignment holds when it is a power of two (set any value with set_u32 to test the
  // reader), and with the default 32 otherwise.
  GgufWriter& set_alignment(uint32_t alignment) { return set_u32("general.alignment", alignment); }

  // ---- tensors ---------------------------------------------------------------------------
  // ne in GGUF order (ne[0] innermost). `data` must hold exactly the bytes the type and shape
  // need (checked; use add_tensor_raw to write a mismatched tensor on purpose).
  GgufWriter& add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne,
                         std::span<const uint8_t> data);
  GgufWriter& add_tensor_f32(const std::string& name, std::vector<int64_t> ne,
                             std::span<const float> data);
  // Data produced only when the file is written (bytes() or write()), so that a large model need
  // not sit in memory: `produce(sink)` must pass the tensor's bytes, in order, through any number
  // of sink(ptr, n) calls totalling exactly the size the type and shape need (checked at write
  // time). It may be called more than once (bytes() and write() each call it) and must then
  // produce the same bytes.
  using ByteSink = std::function<void(const uint8_t* data, size_t n)>;
  using TensorProducer = std::function<void(const ByteSink& sink)>;
  GgufWriter& add_tensor_streamed(const std::string& name, GgmlType type, std::vector<int64_t> ne,
                                  TensorProducer produce);
  // No checks at all: any type number, any byte count (tests of the reader's validation).
  GgufWriter& add_tensor_raw(const std::string& name, uint32_t type, std::vector<int64_t> ne,
                             std::vector<uint8_t> data);

  // ---- hooks for producing broken files (tests) --------------------------------------------
  GgufWriter& set_magic(uint32_t magic) {
    magic_ = magic;
    return *this;
  }
  GgufWriter& set_version(uint32_t version) {
    version_ = version;
    return *this;
  }
  // Header counts written instead of the real ones.
  GgufWriter& override_tensor_count(uint64_t n) {
    tensor_count_ = n;
    return *this;
  }
  GgufWriter& override_kv_count(uint64_t n) {
    kv_count_ = n;
    return *this;
  }
  // Offset (relative to the data section) written into a tensor's info instead of the real
  // one; the data are still placed where they would normally go.
  GgufWriter& override_tensor_offset(const std::string& name, uint64_t offset);

  // ---- output ------------------------------------------------------------------------------
  std::vector<uint8_t> bytes() const;
  // Writes bytes() to `path` (streamed, tensor data are not copied again); with `truncate_to`,
  // only the first that many bytes. Throws rz::Error naming the path on I/O failure.
  void write(const std::string& path, std::optional<size_t> truncate_to = std::nullopt) const;

  // Where the data section and each tensor's data start in bytes() (absolute file offsets).
  size_t data_offset() const;
  size_t tensor_data_offset(const std::string& name) const;
  size_t alignment() const;

 private:
  struct Tensor {
    std::string name;
    uint32_t type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> data;
    std::optional<uint64_t> offset_override;
    TensorProducer producer;  // when set, the data come from it (size bytes), not from `data`
    size_t size = 0;          // bytes of data
  };
  // Passes tensor i's data to sink (from `data` or its producer; checks the producer's count).
  void emit(size_t i, const ByteSink& sink) const;
  std::vector<uint8_t> header_bytes() const;  // through the padding before the data
  std::vector<uint64_t> relative_offsets() const;
  Tensor& tensor(const std::string& name);
  const Tensor& tensor(const std::string& name) const;

  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<Tensor> tensors_;
  uint32_t magic_ = 0x46554747;  // "GGUF"
  uint32_t version_ = 3;
  std::optional<uint64_t> tensor_count_, kv_count_;
};

// Helpers to build metadata values by hand (tests of every value type, nested arrays).
GgufValue gguf_uint(GgufValueType t, uint64_t v);  // UINT8/16/32/64
GgufValue gguf_int(GgufValueType t, int64_t v);    // INT8/16/32/64
GgufValue gguf_float(GgufValueType t, double v);   // FLOAT32/64
GgufValue gguf_bool(bool v);
GgufValue gguf_string(std::string v);
GgufValue gguf_array(GgufValueType elem_type, std::vector<GgufValue> items);

}  // namespace rz
