// The fixture of the in-process server tests (tests/net/server_test.cpp,
// tests/net/openai_server_test.cpp, tests/net/security_server_test.cpp,
// tests/net/tls_server_test.cpp): the real default model on the CPU executor behind the engine,
// the Beast server on an ephemeral port of 127.0.0.1 (start(), or start_tls() for HTTPS and WSS
// with the test certificate), /metrics polling, the reference greedy tokens straight from a fresh
// CPU executor, and the protocol's generate request and stream check.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "cpu/cpu_executor.hpp"
#include "formats/gguf.hpp"
#include "formats/model_file.hpp"
#include "net/server.hpp"
#include "proto/serialize.hpp"
#include "sched/slot_runner.hpp"
#include "tests/net/net_test_util.hpp"
#include "tests/net/test_certificate.hpp"
#include "tokenizer/chat_template.hpp"
#include "tokenizer/tokenizer.hpp"

namespace rz::net {

using namespace testing;
using namespace std::chrono_literals;

inline const char* kModel = RZ_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
inline constexpr int kSlots = 4, kCtx = 2048;

// A generate request of the WebSocket protocol, as JSON.
inline std::string generate_json(const std::string& id, const std::string& prompt, int max_tokens,
                                 float temperature = 0.0f, bool ignore_eos = false,
                                 std::optional<uint64_t> seed = std::nullopt) {
  proto::GenerateRequest r;
  r.id = id;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  r.ignore_eos = ignore_eos;
  return proto::to_json(proto::ClientMessage(r));
}

// Checks the frames of one request: token frames with contiguous indices from 0, then exactly
// one final frame. Returns the generated tokens.
inline std::vector<int64_t> check_stream(const std::vector<Frame>& frames,
                                         std::string* text = nullptr) {
  std::vector<int64_t> toks;
  EXPECT_FALSE(frames.empty());
  for (std::size_t i = 0; i < frames.size(); ++i) {
    const Frame& f = frames[i];
    if (i + 1 < frames.size()) {
      EXPECT_EQ(f.type, "token") << f.raw;
      EXPECT_EQ(f.index, toks.size()) << f.raw;
      EXPECT_FALSE(f.tokens.empty()) << f.raw;
      toks.insert(toks.end(), f.tokens.begin(), f.tokens.end());
      if (text) *text += f.text;
    } else if (f.type == "done") {
      EXPECT_EQ(f.completion_tokens, toks.size()) << f.raw;
    } else {
      EXPECT_EQ(f.type, "error") << f.raw;
    }
  }
  return toks;
}

class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(kModel)) return;
    file_ = ModelFile::open(kModel);
    tok_ = Tokenizer::from_gguf(*file_->gguf());
  }
  static void TearDownTestSuite() {
    tok_.reset();
    file_.reset();
  }

  void SetUp() override { ASSERT_TRUE(file_) << kModel << " is missing: run scripts/setup.sh"; }

  void start(ServerConfig sc = {}, engine::EngineConfig ec = {}) {
    sys_ = std::make_unique<caf::actor_system>(caf_cfg_);
    auto ex = std::make_unique<CpuExecutor>(
        file_, CpuExecutorOptions{.slots = kSlots, .max_context = kCtx, .threads = 2});
    engine_ = engine::Engine::start(*sys_, std::move(ex), tok_, chat_, ec);
    sc.host = "127.0.0.1";
    sc.port = 0;
    sc.io_threads = 2;
    sc.model_name = "SmolLM2-135M-Instruct.Q4_1.gguf";
    if (sc.tls_cert_file.empty()) client_tls_.reset();
    server_ = std::make_unique<Server>(engine_, sc);
    server_->start();
    port_ = server_->port();
    ASSERT_NE(port_, 0);
  }

  // start() over TLS with the test certificate (tests/net/test_certificate.hpp); ep() then
  // reaches the server as a client that trusts that certificate.
  void start_tls(ServerConfig sc = {}, engine::EngineConfig ec = {}) {
    const TestCertificate& cert = test_certificate();
    sc.tls_cert_file = cert.cert_file;
    sc.tls_key_file = cert.key_file;
    client_tls_ = tls_client_context(cert.cert_pem);
    start(std::move(sc), ec);
  }

  // The running server as the test clients reach it: over TLS after start_tls().
  Endpoint ep() const { return Endpoint(port_, client_tls_.get()); }

  void TearDown() override {
    if (server_) server_->shutdown(0ms);
    server_.reset();
    engine_.reset();
    sys_.reset();
  }

  std::string metrics() { return http_request(ep(), "/metrics").body; }

  // Polls /metrics until NAME has VALUE (bounded).
  bool wait_metric(const std::string& name, double value, std::chrono::milliseconds limit = 10s) {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      if (metric(metrics(), name) == value) return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }

  // Greedy tokens straight from a fresh CPU executor (no engine, no network): the reference.
  std::vector<int64_t> direct_greedy(const std::string& prompt, int max_tokens) {
    CpuExecutor ex(file_, CpuExecutorOptions{.slots = 1, .max_context = kCtx, .threads = 2});
    SamplingParams sp;
    sp.temperature = 0;
    rz::SlotRunner run(ex);
    std::vector<int64_t> out;
    int32_t next = run.prefill({0, tok_->encode(prompt, true, true), sp});
    while (!tok_->is_eog(next) && static_cast<int>(out.size()) < max_tokens) {
      out.push_back(next);
      if (static_cast<int>(out.size()) == max_tokens) break;
      next = run.decode(0, next);
    }
    return out;
  }

  // The text of the greedy tokens of `prompt`, as the executor alone makes them.
  std::string greedy_text(const std::string& prompt, int max_tokens) {
    std::vector<int32_t> ids;
    for (int64_t t : direct_greedy(prompt, max_tokens)) ids.push_back(int32_t(t));
    return tok_->decode(ids);
  }

  static inline std::shared_ptr<const ModelFile> file_;
  static inline std::shared_ptr<Tokenizer> tok_;
  std::optional<ChatTemplate> chat_;  // set before start() for chat requests
  caf::actor_system_config caf_cfg_;
  std::unique_ptr<caf::actor_system> sys_;
  std::shared_ptr<engine::Engine> engine_;
  std::unique_ptr<Server> server_;
  uint16_t port_ = 0;
  std::unique_ptr<ssl::context> client_tls_;  // set by start_tls()
};

}  // namespace rz::net
