// safetensors reader, name mapping, shard discovery and writer (see safetensors.hpp).
#include "formats/safetensors.hpp"

#include <simdjson.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>

#include "formats/common.hpp"
#include "formats/hf_config.hpp"

namespace rz {
namespace {

// The format's own limit on the header (safetensors rejects larger ones too).
constexpr uint64_t kMaxHeader = 100u << 20;

struct Dtype {
  GgmlType type;
  size_t size;
};

std::optional<Dtype> parse_dtype(std::string_view s) {
  if (s == "F32") return Dtype{GgmlType::F32, 4};
  if (s == "F16") return Dtype{GgmlType::F16, 2};
  if (s == "BF16") return Dtype{GgmlType::BF16, 2};
  return std::nullopt;
}

void write_file(const std::string& path, const std::vector<uint8_t>& b) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw file_error(path, std::string("cannot create: ") + std::strerror(errno));
  bool ok = std::fwrite(b.data(), 1, b.size(), f) == b.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) throw file_error(path, "write failed");
}

std::string json_escape(std::string_view s) {
  std::string out;
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out;
}

}  // namespace

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::shared_ptr<SafetensorsFile> st(new SafetensorsFile());
  st->file_ = std::make_unique<MappedFile>(path);
  const MappedFile& mf = *st->file_;
  auto fail = [&](const std::string& cause) -> void { throw file_error(path, cause); };

  if (mf.size() < 8) fail("not a safetensors file (shorter than its 8-byte header length)");
  uint64_t hlen;
  std::memcpy(&hlen, mf.data(), 8);
  if (hlen > kMaxHeader)
    fail("not a safetensors file (header length " + std::to_string(hlen) + " is implausible)");
  if (hlen > mf.size() - 8)
    fail("truncated file: header of " + std::to_string(hlen) +
         " bytes runs past the end (file size " + std::to_string(mf.size()) + ")");
  st->data_offset_ = 8 + hlen;
  const uint64_t data_size = mf.size() - st->data_offset_;

  simdjson::dom::parser parser;
  simdjson::padded_string text(reinterpret_cast<const char*>(mf.data() + 8), hlen);
  simdjson::dom::element root;
  if (auto err = parser.parse(text).get(root); err != simdjson::SUCCESS)
    fail(std::string("not a safetensors file (header is not valid JSON: ") +
         simdjson::error_message(err) + ")");
  simdjson::dom::object obj;
  if (root.get_object().get(obj) != simdjson::SUCCESS)
    fail("safetensors header is not a JSON object");

  struct Range {
    uint64_t begin, end;
    size_t idx;
  };
  std::vector<Range> ranges;
  for (auto field : obj) {
    std::string name(field.key);
    if (name == "__metadata__") continue;
    auto bad = [&](const std::string& cause) {
      fail(std::string("tensor '").append(name).append("': ").append(cause));
    };
    simdjson::dom::object t;
    if (field.value.get_object().get(t) != simdjson::SUCCESS) bad("entry is not an object");
    std::string_view dtype_s;
    if (t["dtype"].get_string().get(dtype_s) != simdjson::SUCCESS) bad("missing or bad \"dtype\"");
    auto dtype = parse_dtype(dtype_s);
    if (!dtype)
      bad("dtype " + std::string(dtype_s) + " is not supported (rz reads F32, F16, BF16)");
    simdjson::dom::array shape, offs;
    if (t["shape"].get_array().get(shape) != simdjson::SUCCESS) bad("missing or bad \"shape\"");
    if (t["data_offsets"].get_array().get(offs) != simdjson::SUCCESS || offs.size() != 2)
      bad("missing or bad \"data_offsets\"");
    std::vector<uint64_t> dims;
    uint64_t n = 1;
    for (auto d : shape) {
      uint64_t v = 0;
      if (d.get_uint64().get(v) != simdjson::SUCCESS)
        bad("shape entries must be non-negative integers");
      if (v > (uint64_t{1} << 40) || __builtin_mul_overflow(n, v, &n) || n > (uint64_t{1} << 42))
        bad("shape is too large");
      dims.push_back(v);
    }
    if (dims.size() > 4) bad(std::to_string(dims.size()) + " dimensions (rz supports up to 4)");
    uint64_t begin = 0, end = 0;  // bad() throws: never read unset
    if (offs.at(0).get_uint64().get(begin) != simdjson::SUCCESS ||
        offs.at(1).get_uint64().get(end) != simdjson::SUCCESS || end < begin)
      bad("bad \"data_offsets\"");
    if (end > data_size)
      bad("truncated file: data [" + std::to_string(begin) + ", " + std::to_string(end) +
          ") runs past the end of the data (" + std::to_string(data_size) + " bytes)");
    if (end - begin != n * dtype->size)
      bad(std::to_string(end - begin) + " data bytes do not match shape and dtype (" +
          std::to_string(n * dtype->size) + " expected)");

    TensorView tv;
    tv.name = name;
    tv.type = dtype->type;
    tv.n_dims = static_cast<int>(dims.size());
    for (size_t i = 0; i < dims.size(); ++i)  // GGUF order: innermost first
      tv.ne[i] = static_cast<int64_t>(dims[dims.size() - 1 - i]);
    tv.data = mf.data() + st->data_offset_ + begin;
    tv.nbytes = static_cast<size_t>(end - begin);
    if (st->index_.count(name)) bad("appears twice");
    st->index_.emplace(name, st->tensors_.size());
    if (end > begin) ranges.push_back({begin, end, st->tensors_.size()});
    st->tensors_.push_back(std::move(tv));
  }

  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t k = 1; k < ranges.size(); ++k)
    if (ranges[k].begin < ranges[k - 1].end)
      fail("tensors '" + st->tensors_[ranges[k - 1].idx].name + "' and '" +
           st->tensors_[ranges[k].idx].name + "' overlap");
  return st;
}

const TensorView* SafetensorsFile::find_tensor(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

std::optional<std::string> hf_to_gguf_name(std::string_view n, Arch arch) {
  // Gemma 3's image-text checkpoints keep the language model under a prefix (transformers before
  // 4.52: language_model.model.* and language_model.lm_head.*; 4.52 on: model.language_model.*).
  std::string unprefixed;
  if (arch == Arch::Gemma3) {
    for (const auto& [from, to] :
         {std::pair<std::string_view, std::string_view>{"language_model.model.", "model."},
          {"model.language_model.", "model."},
          {"language_model.lm_head.", "lm_head."}})
      if (n.starts_with(from)) {
        unprefixed = std::string(to) + std::string(n.substr(from.size()));
        n = unprefixed;
        break;
      }
  }
  if (n == "model.embed_tokens.weight") return "token_embd.weight";
  if (n == "model.norm.weight") return "output_norm.weight";
  if (n == "lm_head.weight") return "output.weight";
  constexpr std::string_view kLayers = "model.layers.";
  if (n.substr(0, kLayers.size()) != kLayers) return std::nullopt;
  n.remove_prefix(kLayers.size());
  size_t digits = 0;
  while (digits < n.size() && digits < 6 && n[digits] >= '0' && n[digits] <= '9') ++digits;
  if (digits == 0 || digits >= n.size() || n[digits] != '.') return std::nullopt;
  if (digits > 1 && n[0] == '0') return std::nullopt;
  std::string layer(n.substr(0, digits));
  n.remove_prefix(digits + 1);

  std::string_view suffix;
  if (n.ends_with(".weight"))
    suffix = ".weight";
  else if (n.ends_with(".bias"))
    suffix = ".bias";
  else
    return std::nullopt;
  n.remove_suffix(suffix.size());

  static const std::pair<std::string_view, std::string_view> kMap[] = {
      {"self_attn.q_proj", "attn_q"},
      {"self_attn.k_proj", "attn_k"},
      {"self_attn.v_proj", "attn_v"},
      {"self_attn.o_proj", "attn_output"},
      {"self_attn.q_norm", "attn_q_norm"},  // qwen3
      {"self_attn.k_norm", "attn_k_norm"},
      {"self_attn.qkv_proj", "attn_qkv"},  // phi3: [q; k; v] rows
      {"mlp.gate_up_proj", "ffn_up"},      // phi3: [gate; up] rows, as llama.cpp names it
      {"mlp.gate_proj", "ffn_gate"},
      {"mlp.up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"},
      {"input_layernorm", "attn_norm"},
      {"post_attention_layernorm", "ffn_norm"},
  };
  // Gemma's four norms a layer: its post_attention_layernorm follows the attention block (in
  // Llama it is the feed-forward block's input norm, which Gemma calls pre_feedforward).
  static const std::pair<std::string_view, std::string_view> kGemma[] = {
      {"post_attention_layernorm", "post_attention_norm"},
      {"pre_feedforward_layernorm", "ffn_norm"},
      {"post_feedforward_layernorm", "post_ffw_norm"},
  };
  if (arch == Arch::Gemma3)
    for (const auto& [hf, gg] : kGemma)
      if (n == hf) return "blk." + layer + "." + std::string(gg) + std::string(suffix);
  for (const auto& [hf, gg] : kMap)
    if (n == hf) return "blk." + layer + "." + std::string(gg) + std::string(suffix);
  return std::nullopt;
}

SafetensorsShards find_safetensors_shards(const std::string& dir) {
  namespace fs = std::filesystem;
  SafetensorsShards out;
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  std::error_code ec;
  if (fs::exists(index, ec)) {
    const std::string ipath = index.string();
    std::string text = read_text_file(ipath);
    simdjson::dom::parser parser;
    simdjson::padded_string ps(text);
    simdjson::dom::element root;
    simdjson::dom::object wm;
    if (auto err = parser.parse(ps).get(root); err != simdjson::SUCCESS)
      throw file_error(ipath, std::string("invalid JSON: ") + simdjson::error_message(err));
    if (root["weight_map"].get_object().get(wm) != simdjson::SUCCESS)
      throw file_error(ipath, "missing \"weight_map\" object");
    std::set<std::string> files;
    for (auto field : wm) {
      std::string_view file;
      if (field.value.get_string().get(file) != simdjson::SUCCESS)
        throw file_error(ipath,
                         "weight_map entry '" + std::string(field.key) + "' is not a string");
      if (file.find('/') != std::string_view::npos || file == "." || file == "..")
        throw file_error(ipath,
                         "weight_map names a file outside the directory: " + std::string(file));
      out.weight_map.emplace(std::string(field.key), std::string(file));
      files.insert(std::string(file));
    }
    for (const auto& f : files) out.files.push_back((fs::path(dir) / f).string());
  } else {
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".safetensors") out.files.push_back(e.path().string());
    if (ec) throw file_error(dir, "cannot list directory: " + ec.message());
    std::sort(out.files.begin(), out.files.end());
  }
  if (out.files.empty()) throw file_error(dir, "no *.safetensors files in the directory");
  return out;
}

std::vector<uint8_t> safetensors_bytes(const std::vector<SafetensorsEntry>& entries,
                                       const std::map<std::string, std::string>& metadata) {
  std::ostringstream h;
  h << '{';
  bool first_entry = true;
  auto sep = [&] {
    if (!first_entry) h << ',';
    first_entry = false;
  };
  if (!metadata.empty()) {
    sep();
    h << "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      h << (first ? "" : ",") << '"' << json_escape(k) << "\":\"" << json_escape(v) << '"';
      first = false;
    }
    h << '}';
  }
  uint64_t off = 0;
  for (const auto& e : entries) {
    sep();
    h << '"' << json_escape(e.name) << "\":{\"dtype\":\"" << json_escape(e.dtype)
      << "\",\"shape\":[";
    for (size_t i = 0; i < e.shape.size(); ++i) h << (i ? "," : "") << e.shape[i];
    h << "],\"data_offsets\":[" << off << ',' << off + e.data.size() << "]}";
    off += e.data.size();
  }
  h << '}';
  std::string hs = h.str();
  hs.resize((hs.size() + 7) / 8 * 8, ' ');
  const uint64_t hlen = hs.size();
  std::vector<uint8_t> out(8 + hs.size() + off);
  std::memcpy(out.data(), &hlen, 8);
  std::memcpy(out.data() + 8, hs.data(), hs.size());
  size_t pos = 8 + hs.size();
  for (const auto& e : entries) {
    if (!e.data.empty()) std::memcpy(out.data() + pos, e.data.data(), e.data.size());
    pos += e.data.size();
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& entries,
                       const std::map<std::string, std::string>& metadata) {
  write_file(path, safetensors_bytes(entries, metadata));
}

}  // namespace rz
