// rz info: what a model file holds, without running it.
//   rz info --model FILE [--tensors]
// Prints the format and file size, the architecture (every ModelConfig field), a per-type
// summary of the tensors (all of them with --tensors), the tokenizer (model, pre-tokenizer,
// vocabulary size, BOS/EOS ids and texts, add_bos/add_eos) and the chat template (its family
// when rz recognises it, and its first lines). The whole report is built before anything is
// printed, so a failure prints one line on stderr and nothing on stdout.

#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>

#include "apps/cli.hpp"
#include "apps/commands.hpp"
#include "apps/model_setup.hpp"
#include "formats/common.hpp"
#include "formats/gguf.hpp"
#include "formats/model_file.hpp"
#include "tokenizer/chat_template.hpp"
#include "tokenizer/tokenizer.hpp"

namespace rz::cmd {
namespace {

namespace fs = std::filesystem;

std::string human_bytes(uint64_t n) {
  char buf[64];
  if (n >= (uint64_t{1} << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", double(n) / (1 << 30));
  else if (n >= (uint64_t{1} << 20))
    std::snprintf(buf, sizeof buf, "%.2f MiB", double(n) / (1 << 20));
  else if (n >= 1024)
    std::snprintf(buf, sizeof buf, "%.2f KiB", double(n) / 1024);
  else
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
  return buf;
}

// A token or template text on one line: control characters escaped.
std::string printable(std::string_view s, size_t max_len = 200) {
  std::string out;
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c == '\r')
      out += "\\r";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += ch;
    }
    if (out.size() >= max_len) return out + "...";
  }
  return out;
}

uint64_t files_size(const ModelFile& m) {
  std::error_code ec;
  if (!fs::is_directory(m.path(), ec)) return fs::file_size(m.path(), ec);
  uint64_t total = 0;
  for (const auto& e : fs::directory_iterator(m.path(), ec))
    if (e.path().extension() == ".safetensors") total += e.file_size(ec);
  return total;
}

const char* rope_scaling_name(RopeScaling::Type t) {
  switch (t) {
    case RopeScaling::Type::None: return "none";
    case RopeScaling::Type::Linear: return "linear";
    case RopeScaling::Type::Yarn: return "yarn";
    case RopeScaling::Type::Llama3: return "llama3";
  }
  return "?";
}

void architecture(std::ostream& os, const ModelFile& m) {
  const ModelConfig& c = m.config();
  os << "architecture: " << arch_name(c.arch) << "\n"
     << "  n_vocab         " << c.n_vocab << "\n"
     << "  n_embd          " << c.n_embd << "\n"
     << "  n_layer         " << c.n_layer << "\n"
     << "  n_head          " << c.n_head << "\n"
     << "  n_head_kv       " << c.n_head_kv << "\n"
     << "  head_dim        " << c.head_dim << "\n"
     << "  n_rot           " << c.n_rot << "\n"
     << "  n_ff            " << c.n_ff << "\n"
     << "  n_ctx_train     " << c.n_ctx_train << "\n"
     << "  rope_theta      " << c.rope_theta << "\n"
     << "  norm_eps        " << c.norm_eps << "\n"
     << "  rope_neox       " << (c.rope_neox ? "true" : "false") << "\n"
     << "  rope_scaling    " << rope_scaling_name(c.rope_scaling.type);
  if (c.rope_scaling.type != RopeScaling::Type::None) {
    os << " (factor " << c.rope_scaling.factor;
    if (c.rope_scaling.original_context)
      os << ", original context " << c.rope_scaling.original_context;
    if (c.rope_scaling.type == RopeScaling::Type::Llama3)
      os << ", low_freq_factor " << c.rope_scaling.low_freq_factor << ", high_freq_factor "
         << c.rope_scaling.high_freq_factor;
    os << ")";
  }
  if (m.find_tensor("rope_freqs.weight")) os << " + rope_freqs.weight frequency factors";
  os << "\n"
     << "  tied_embeddings " << (c.tied_embeddings ? "true" : "false") << "\n"
     << "  qkv_bias        " << (c.qkv_bias ? "true" : "false") << "\n";
  // What departs from the Llama block, only where it does (qwen3, phi3, gemma3).
  if (c.qk_norm) os << "  qk_norm         true (RMSNorm of each q and k head)\n";
  if (c.fused_qkv_gate_up) os << "  fused tensors   attn_qkv [q; k; v], ffn_up [gate; up]\n";
  if (c.sliding_window > 0) {
    int local = 0;
    for (int l = 0; l < c.n_layer; ++l) local += c.layer_window(l) > 0;
    os << "  sliding_window  " << c.sliding_window << " tokens, " << local << " of " << c.n_layer
       << " layers";
    if (local < c.n_layer) {
      os << " (global:";
      for (int l = 0; l < c.n_layer; ++l)
        if (c.layer_window(l) == 0) os << " " << l;
      os << ")";
    }
    os << "\n";
  }
  if (c.rope_theta_swa > 0) os << "  rope_theta_swa  " << c.rope_theta_swa << " (sliding layers)\n";
  if (c.act != ModelConfig::Act::SiLU) os << "  activation      gelu (tanh)\n";
  if (c.embd_scale > 0) os << "  embd_scale      " << c.embd_scale << "\n";
  if (c.attn_scale > 0) os << "  attn_scale      " << c.attn_scale << "\n";
  if (c.post_norms) os << "  post_norms      true (after attention and feed-forward)\n";
  if (c.norm_weight_add != 0) os << "  norm weights    + " << c.norm_weight_add << " at load\n";
  if (c.final_logit_softcap > 0) os << "  logit_softcap   " << c.final_logit_softcap << "\n";
}

void tensors(std::ostream& os, const ModelFile& m, bool list_all) {
  struct Sum {
    size_t count = 0;
    uint64_t bytes = 0;
  };
  std::map<std::string, Sum> by_type;
  uint64_t total = 0;
  for (const TensorView& t : m.tensors()) {
    auto& s = by_type[std::string(type_traits(t.type).name)];
    ++s.count;
    s.bytes += t.nbytes;
    total += t.nbytes;
  }
  os << "tensors: " << m.tensors().size() << " (" << human_bytes(total) << ")\n";
  char buf[160];
  for (const auto& [name, s] : by_type) {
    std::snprintf(buf, sizeof buf, "  %-8s %6zu tensors %14llu bytes (%s)\n", name.c_str(), s.count,
                  static_cast<unsigned long long>(s.bytes), human_bytes(s.bytes).c_str());
    os << buf;
  }
  if (!list_all) return;
  os << "tensor list (name, type, shape in GGUF order ne[0] first, bytes):\n";
  for (const TensorView& t : m.tensors()) {
    std::string shape = "[";
    for (int d = 0; d < t.n_dims; ++d) shape += (d ? ", " : "") + std::to_string(t.ne[d]);
    shape += "]";
    std::snprintf(buf, sizeof buf, "  %-36s %-6s %-16s %llu\n", t.name.c_str(),
                  std::string(type_traits(t.type).name).c_str(), shape.c_str(),
                  static_cast<unsigned long long>(t.nbytes));
    os << buf;
  }
}

std::string token_desc(const Tokenizer& tok, int32_t id) {
  if (id < 0) return "none";
  if (id >= tok.n_vocab()) return std::to_string(id) + " (out of range)";
  return std::to_string(id) + " \"" + printable(tok.token_text(id)) + "\"";
}

// The tokenizer as rz builds it; when it cannot, what the metadata says and why.
std::shared_ptr<Tokenizer> tokenizer(std::ostream& os, const ModelFile& m) {
  std::shared_ptr<Tokenizer> tok;
  std::string why;
  try {
    tok = m.gguf() ? Tokenizer::from_gguf(*m.gguf()) : Tokenizer::from_hf_dir(m.hf_dir());
  } catch (const Error& e) {
    why = e.what();
  }
  os << "tokenizer:\n";
  if (tok) {
    os << "  model           " << tok->model() << "\n"
       << "  pre             " << tok->pre() << "\n"
       << "  vocab size      " << tok->n_vocab() << "\n"
       << "  bos             " << token_desc(*tok, tok->bos_id()) << "\n"
       << "  eos             " << token_desc(*tok, tok->eos_id()) << "\n"
       << "  add_bos         " << (tok->add_bos() ? "true" : "false") << "\n"
       << "  add_eos         " << (tok->add_eos() ? "true" : "false") << "\n";
    return tok;
  }
  if (auto g = m.gguf()) {
    auto str = [&](const char* k) { return g->get_string(k).value_or("(absent)"); };
    auto num = [&](const char* k) {
      auto v = g->get_int(k);
      return v ? std::to_string(*v) : std::string("(absent)");
    };
    os << "  model           " << str("tokenizer.ggml.model") << "\n"
       << "  pre             " << str("tokenizer.ggml.pre") << "\n"
       << "  vocab size      " << g->get_string_array("tokenizer.ggml.tokens").size() << "\n"
       << "  bos             " << num("tokenizer.ggml.bos_token_id") << "\n"
       << "  eos             " << num("tokenizer.ggml.eos_token_id") << "\n";
  }
  os << "  rz cannot load it: " << printable(why) << "\n";
  return nullptr;
}

void chat_template(std::ostream& os, const ModelFile& m, const Tokenizer* tok) {
  const std::string src = chat_template_source(m);
  if (src.empty()) {
    const std::string family = default_chat_family(m.config().arch);
    os << "chat template: none";
    if (!family.empty()) os << " (chat uses the " << family << " family)";
    os << "\n";
    return;
  }
  std::string family;
  try {
    auto text = [&](int32_t id) {
      return tok && id >= 0 && id < tok->n_vocab() ? tok->token_text(id) : std::string();
    };
    family = ChatTemplate::from_jinja(src, text(tok ? tok->bos_id() : -1),
                                      text(tok ? tok->eos_id() : -1))
                 .name();
  } catch (const Error&) {
    family = "unrecognised (use --template NAME with rz generate)";
  }
  os << "chat template: " << family << " (" << src.size() << " characters)\n";
  std::istringstream lines(src);
  std::string line;
  for (int i = 0; i < 6 && std::getline(lines, line); ++i)
    os << "  | " << printable(line, 120) << "\n";
  if (std::getline(lines, line)) os << "  | ...\n";
}

}  // namespace

int info(int argc, char** argv) {
  cli::Flags f("info",
               "Show what a model file holds: architecture, tensors, tokenizer, chat "
               "template.");
  f.opt("model", "FILE", "model file (.gguf, .safetensors or a directory)")
      .sw("tensors", "also list every tensor (name, type, shape, bytes)");
  int code = 0;
  if (!f.parse(argc, argv, code)) return code;
  if (!f.has("model")) throw Error("--model FILE is required (see rz info --help)");

  auto m = ModelFile::open(f.str("model"));
  std::ostringstream os;
  os << "file: " << m->path() << "\n  format " << m->format();
  if (auto g = m->gguf())
    os << " v" << g->version() << ", " << g->metadata().size() << " metadata keys";
  const uint64_t size = files_size(*m);
  os << ", " << size << " bytes (" << human_bytes(size) << ")\n";
  architecture(os, *m);
  tensors(os, *m, f.has("tensors"));
  auto tok = tokenizer(os, *m);
  chat_template(os, *m, tok.get());
  const std::string out = os.str();
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace rz::cmd
