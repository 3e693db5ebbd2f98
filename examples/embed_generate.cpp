// Embedding rz in another service, with no network: spawn the engine in the program's own
// caf::actor_system, open a session whose FrameSink prints token text to stdout, send one
// generate request and wait for its done (or error) frame.
//
//   example_embed_generate --model models/SmolLM2-135M-Instruct.Q4_1.gguf --prompt "Hello"
//       [--chat] [--max-tokens N] [--temperature T] [--seed S] [--stop TEXT] [--slots N]
//       [--device auto|cpu|cuda]
//
// The executor comes from the factory the rz command uses (apps/executor_factory.hpp), with the
// default context per slot (model/executor.hpp).
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <variant>

#include <caf/all.hpp>

#include "actors/engine.hpp"
#include "apps/executor_factory.hpp"
#include "formats/gguf.hpp"
#include "formats/model_file.hpp"
#include "tokenizer/chat_template.hpp"
#include "tokenizer/tokenizer.hpp"

namespace {

// Prints token text as it arrives; remembers the request's last frame.
class StdoutSink : public rz::engine::FrameSink {
 public:
  void deliver(rz::proto::ServerFrame frame) override {
    if (const auto* t = std::get_if<rz::proto::TokenFrame>(&frame)) {
      std::fwrite(t->text.data(), 1, t->text.size(), stdout);
      std::fflush(stdout);
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    last_ = std::move(frame);
    cv_.notify_all();
  }
  rz::proto::ServerFrame wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return last_.has_value(); });
    return *last_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<rz::proto::ServerFrame> last_;
};

std::optional<rz::ChatTemplate> model_chat_template(const rz::ModelFile& mf,
                                                    const rz::Tokenizer& tok) {
  auto g = mf.gguf();
  if (!g) return std::nullopt;
  const std::string src = g->get_string("tokenizer.chat_template").value_or("");
  if (src.empty()) return std::nullopt;
  auto text = [&](int32_t id) {
    return id >= 0 && id < tok.n_vocab() ? tok.token_text(id) : std::string();
  };
  try {
    return rz::ChatTemplate::from_jinja(src, text(tok.bos_id()), text(tok.eos_id()));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

int usage() {
  std::fprintf(stderr,
               "usage: example_embed_generate --model FILE --prompt TEXT [--chat] [--max-tokens N]"
               " [--temperature T] [--seed S] [--stop TEXT] [--slots N]"
               " [--device auto|cpu|cuda]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, prompt;
  bool chat = false;
  rz::proto::GenerateRequest req;
  req.id = "r1";
  req.max_tokens = 64;
  req.sampling.temperature = 0.0f;
  int slots = 1;
  std::string device = "auto";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(usage());
      }
      return argv[++i];
    };
    if (a == "--model")
      model = value();
    else if (a == "--prompt")
      prompt = value();
    else if (a == "--chat")
      chat = true;
    else if (a == "--max-tokens")
      req.max_tokens = std::atoi(value().c_str());
    else if (a == "--temperature")
      req.sampling.temperature = std::strtof(value().c_str(), nullptr);
    else if (a == "--seed")
      req.sampling.seed = std::strtoull(value().c_str(), nullptr, 10);
    else if (a == "--stop")
      req.stop.push_back(value());
    else if (a == "--slots")
      slots = std::atoi(value().c_str());
    else if (a == "--device")
      device = value();
    else
      return usage();
  }
  if (model.empty() || prompt.empty()) return usage();
  if (chat)
    req.messages = {{"user", prompt}};
  else
    req.prompt = prompt;

  try {
    std::shared_ptr<const rz::ModelFile> mf = rz::ModelFile::open(model);
    std::shared_ptr<rz::Tokenizer> tok = mf->gguf() ? rz::Tokenizer::from_gguf(*mf->gguf())
                                                    : rz::Tokenizer::from_hf_dir(mf->hf_dir());
    std::unique_ptr<rz::Executor> executor =
        rz::make_executor(rz::resolve_device(device), mf, {.slots = slots}).executor;

    caf::actor_system_config cfg;
    caf::actor_system sys{cfg};
    rz::engine::EngineConfig ec;
    auto engine = rz::engine::Engine::start(sys, std::move(executor), tok,
                                            model_chat_template(*mf, *tok), ec);
    auto sink = std::make_shared<StdoutSink>();
    rz::engine::Session session = engine->open_session(sink);
    session.generate(req);
    rz::proto::ServerFrame last = sink->wait();
    std::fputc('\n', stdout);
    int rc = 0;
    if (const auto* d = std::get_if<rz::proto::DoneFrame>(&last)) {
      std::fprintf(stderr,
                   "done: %s, %llu prompt tokens, %llu generated, ttft %.1f ms, total %.1f ms\n",
                   std::string(rz::proto::to_string(d->finish_reason)).c_str(),
                   static_cast<unsigned long long>(d->usage.prompt_tokens),
                   static_cast<unsigned long long>(d->usage.completion_tokens),
                   d->timings.ttft_ms.value_or(0.0), d->timings.total_ms);
    } else if (const auto* e = std::get_if<rz::proto::ErrorFrame>(&last)) {
      std::fprintf(stderr, "error %s: %s\n", std::string(rz::proto::to_string(e->code)).c_str(),
                   e->message.c_str());
      rc = 1;
    }
    session.close();
    engine->shutdown(std::chrono::milliseconds(1000));
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "example_embed_generate: %s\n", e.what());
    return 1;
  }
}
