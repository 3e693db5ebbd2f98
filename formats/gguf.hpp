// GGUF reader (versions 2 and 3): memory-maps the file, parses every metadata value type and the
// tensor infos, and validates alignment, offsets and sizes against the file length.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "formats/tensor.hpp"

namespace rz {

enum class GgufValueType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};

struct GgufValue;
struct GgufArray {
  GgufValueType elem_type = GgufValueType::UINT8;
  std::vector<GgufValue> items;
};

// One metadata value. Integers keep their declared width in `type`; the accessors convert.
struct GgufValue {
  GgufValueType type = GgufValueType::UINT8;
  std::variant<uint64_t, int64_t, double, bool, std::string, std::shared_ptr<GgufArray>> v;

  bool is_integer() const;
  bool is_float() const;
  int64_t as_int() const;   // throws rz::Error when not an integer/bool
  double as_float() const;  // integers convert
  bool as_bool() const;
  const std::string& as_string() const;
  const GgufArray& as_array() const;
  std::string to_display(size_t max_items = 8) const;  // short human-readable form (rz info)
};

const char* gguf_value_type_name(GgufValueType t);

// A memory-mapped read-only file.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // throws rz::Error naming the path
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

class GgufFile {
 public:
  // Opens and validates. Throws rz::Error("PATH: cause") for a missing file, a file that is not
  // GGUF, an unsupported version, truncated data, unknown tensor types, misaligned, overlapping or
  // out-of-bounds tensors.
  static std::shared_ptr<GgufFile> open(const std::string& path);
  // True when the file starts with the GGUF magic (cheap sniffing; false when unreadable).
  static bool looks_like_gguf(const std::string& path);

  const std::string& path() const { return file_->path(); }
  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }
  size_t data_offset() const { return data_offset_; }

  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  // Keys in file order (for display).
  const std::vector<std::string>& metadata_keys() const { return kv_order_; }
  const GgufValue* find(std::string_view key) const;
  // Typed look-ups: nullopt when absent; rz::Error when present with an incompatible type.
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string> get_string(std::string_view key) const;
  std::vector<std::string> get_string_array(std::string_view key) const;  // empty when absent
  std::vector<float> get_float_array(std::string_view key) const;
  std::vector<int64_t> get_int_array(std::string_view key) const;

  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find_tensor(std::string_view name) const;

 private:
  GgufFile() = default;
  std::unique_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  size_t data_offset_ = 0;
  std::map<std::string, GgufValue> kv_;
  std::vector<std::string> kv_order_;
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace rz
