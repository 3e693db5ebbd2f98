// rz serve: loads a model onto the CPU or CUDA executor (apps/executor_factory.hpp), starts the
// actor engine (actors/engine.hpp) in a caf::actor_system, and serves it on one port
// (net/server.hpp): the browser page at /, /health, /metrics and the WebSocket protocol at /v1/ws
// (docs/protocol.md); over TLS (HTTPS, WSS) with --tls-cert and --tls-key (net/tls.hpp,
// docs/security.md). SIGINT/SIGTERM stop accepting, drain the engine for up to --drain-seconds,
// close every connection cleanly and exit 0; a second one during the drain exits at once
// (128 + the signal).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "apps/cli.hpp"
#include "apps/commands.hpp"
#include "apps/executor_factory.hpp"
#include "apps/model_setup.hpp"
#include "formats/common.hpp"
#include "formats/gguf.hpp"
#include "formats/model_file.hpp"
#include "net/auth.hpp"
#include "net/fd_limit.hpp"
#include "net/origin_policy.hpp"
#include "net/server.hpp"
#include "net/tls.hpp"
#include "tokenizer/chat_template.hpp"
#include "tokenizer/tokenizer.hpp"

namespace rz::cmd {
namespace {

long long ranged(const cli::Flags& f, const char* name, long long lo, long long hi) {
  const long long v = f.integer(name);
  if (v < lo || v > hi)
    throw Error(std::string("--") + name + ": must be between " + std::to_string(lo) + " and " +
                std::to_string(hi));
  return v;
}

std::string base_name(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const auto slash = p.find_last_of('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

}  // namespace

int serve(int argc, char** argv) {
  cli::Flags f("serve",
               "Serve a model over WebSocket (/v1/ws) and HTTP: a browser page at /, "
               "/health, /metrics and the OpenAI API; HTTPS and WSS with --tls-cert and "
               "--tls-key. SIGINT/SIGTERM drain and exit (a second one exits at once).");
  f.opt("model", "FILE", "model file (.gguf, .safetensors or a directory)")
      .opt("host", "ADDR", "address to listen on", "127.0.0.1")
      .opt("port", "N", "port; 0 picks a free one (printed at start)", "8080")
      .opt("device", "auto|cpu|cuda", "executor; auto picks the GPU when one is present", "auto")
      .opt("gpu", "N", "CUDA device index", "0")
      .opt("kv-fraction", "F",
           "share of the device memory left after the weights that the KV "
           "cache may take (it never takes more than the slots can use)",
           "0.9")
      .opt("kv-block", "N", "tokens per KV cache block", "16")
      .opt("max-step-tokens", "N",
           "tokens one step computes: every running request's next token, then "
           "chunks of waiting prompts (chunked prefill); at least --max-slots",
           "128 (or --max-slots + 64 when more)")
      .opt("idle-step-tokens", "N",
           "tokens a step may compute when no request decodes in it (prompts into an idle "
           "server: no stream's next token waits on that step); --max-step-tokens where "
           "that is more",
           "2048")
      .opt("step-log", "FILE",
           "write a CSV line per executor step (start, executor and round-trip time, host gap "
           "before it, decodes, prompt chunks and their tokens) to FILE",
           "")
      .sw("no-plan-ahead",
          "plan every step after the one before it has been applied, instead of planning it "
          "while the one before it runs (for comparison)")
      .sw("no-prefix-cache",
          "compute every prompt in full (no reuse of the KV cache of earlier "
          "requests' identical prefixes)")
      .sw("int8-activations",
          "cuda: decode matmuls of 1-4 tokens on activations rounded to int8 (faster where "
          "4-bit matmuls bound decode, e.g. 8B models at batch 1; logits move by ~1 %, and a "
          "request's greedy tokens may then differ alone and in a batch at near-ties)")
      .opt("weights", "stored|fp8", kWeightsHelp, "stored")
      .sw("no-fp16-copies", kNoFp16CopiesHelp)
      .sw("no-gemm-tune", kNoGemmTuneHelp)
      .sw("inline-graphs",
          "cuda: build each new CUDA graph inside the step that first needs it (the step then "
          "waits 5-10 ms) instead of running that step as a larger graph already built and "
          "building its own on a helper thread meanwhile")
      .opt("max-slots", "N", "requests decoded together (KV cache slots)", "4 on cpu, 16 on cuda")
      .opt("ctx", "N", "context length per slot (prompt + generated)",
           "min(training context, 4096)")
      .opt("threads", "N", "CPU threads of the executor; 0 = all cores", "0")
      .opt("max-queue", "N", "waiting requests beyond the slots; more get `overloaded`", "64")
      .opt("max-inflight", "N", "running requests per connection; more get `overloaded`", "16")
      .opt("template", "NAME",
           "chat template family instead of the model's (by default the model's, or its "
           "architecture's where the file has none)")
      .opt("max-connections", "N",
           "open WebSocket connections; more get HTTP 503 (lowered "
           "to fit the open-file limit, which is raised to its hard "
           "limit at start; the log says so)",
           "256")
      .opt("max-connections-per-ip", "N",
           "open WebSocket connections from one address; more "
           "get HTTP 503 (sockets of any kind from one address: "
           "twice this plus 8)",
           "32")
      .opt("first-frame-timeout", "S",
           "close a connection that sends no HTTP request (with --tls-cert: TLS handshake "
           "included), or after the upgrade no WebSocket frame, within S seconds "
           "(0: no deadline)",
           "10")
      .opt("api-key", "KEY",
           "require this key (Authorization: Bearer KEY) for the OpenAI API, the WebSocket "
           "and /metrics; repeat for several; also --api-key-file and the RZ_API_KEY "
           "environment variable (docs/security.md)",
           "")
      .opt("api-key-file", "FILE", "API keys, one per line ('#' comments)", "")
      .sw("metrics-public", "serve /metrics without a key when keys are set")
      .opt("tls-cert", "FILE",
           "serve HTTPS and WSS (TLS 1.2 or 1.3) instead of HTTP and WS on the same port, with "
           "this PEM certificate (the server's first, then any intermediates); needs --tls-key "
           "(docs/security.md)",
           "")
      .opt("tls-key", "FILE", "the PEM private key of --tls-cert (unencrypted)", "")
      .opt("allowed-origins", "LIST",
           "comma-separated origins (http://host:port) whose pages "
           "may open the WebSocket besides the server's own (bound "
           "to loopback: localhost, 127.0.0.1, [::1] on any port); "
           "* allows all; other origins get HTTP 403",
           "")
      .opt("idle-timeout", "S",
           "close a connection whose peer sent nothing (not even a pong to "
           "the ping sent at half this time) for S seconds",
           "60")
      .opt("max-frame-bytes", "N",
           "longest client frame; longer ones get `too_large`, and "
           "beyond 4x (at least 64 KiB) the connection is closed",
           "1048576")
      .opt("queue-frames", "N",
           "outgoing frames waiting per connection before the client "
           "counts as a slow consumer",
           "512")
      .opt("queue-bytes", "N", "outgoing bytes waiting per connection (same)", "4194304")
      .opt("send-buffer", "N",
           "the kernel's send buffer of each accepted socket in bytes (SO_SNDBUF; 0: the OS "
           "default, which grows to megabytes): with --queue-bytes, what a client that does not "
           "read can hold",
           "0")
      .opt("served-model-name", "NAME",
           "the model's id in the OpenAI-compatible API (/v1/models and every response); "
           "default: the model file's name without its extension",
           "")
      .opt("request-timeout", "S",
           "end every request S seconds after it arrived (finish_reason timeout with the "
           "tokens sent so far, or error code timeout before the first; a request's timeout_ms "
           "may shorten it); 0: no bound",
           "0")
      .opt("io-threads", "N", "network threads", "1")
      .opt("drain-seconds", "S",
           "at SIGINT/SIGTERM, let running requests finish for up to S "
           "seconds",
           "10");
  int code = 0;
  if (!f.parse(argc, argv, code)) return code;
  if (!f.has("model")) throw Error("--model FILE is required (see rz serve --help)");

  std::string why_cpu;
  const std::string device = resolve_device(f.str("device"), &why_cpu);
  if (!why_cpu.empty()) why_cpu = " (auto: " + why_cpu + ")";

  net::ServerConfig scfg;
  scfg.host = f.str("host");
  scfg.port = static_cast<uint16_t>(ranged(f, "port", 0, 65535));
  scfg.max_connections = static_cast<int>(ranged(f, "max-connections", 1, 1 << 20));
  scfg.max_connections_per_ip = static_cast<int>(ranged(f, "max-connections-per-ip", 1, 1 << 20));
  scfg.first_frame_timeout = std::chrono::seconds(ranged(f, "first-frame-timeout", 0, 3600));
  if (f.has("allowed-origins"))
    scfg.allowed_origins = net::parse_origin_list(f.str("allowed-origins"));
  for (const std::string& k : f.all("api-key")) {
    net::check_key(k, "--api-key");
    scfg.api_keys.push_back(k);
  }
  if (f.has("api-key-file"))
    for (std::string& k : net::read_key_file(f.str("api-key-file"))) scfg.api_keys.push_back(k);
  if (const char* env = std::getenv("RZ_API_KEY"); env && *env) {
    net::check_key(env, "RZ_API_KEY");
    scfg.api_keys.emplace_back(env);
  }
  scfg.metrics_public = f.has("metrics-public");
  if (f.has("tls-cert") != f.has("tls-key"))
    throw Error(std::string(f.has("tls-cert") ? "--tls-cert needs --tls-key"
                                              : "--tls-key needs --tls-cert") +
                " (TLS takes a certificate and its private key)");
  std::string tls_line;  // checked here, before the model loads; the server loads them again
  if (f.has("tls-cert")) {
    scfg.tls_cert_file = f.str("tls-cert");
    scfg.tls_key_file = f.str("tls-key");
    tls_line = net::describe_tls_certificate(
        *net::load_tls_context(scfg.tls_cert_file, scfg.tls_key_file));
  }
  scfg.idle_timeout = std::chrono::seconds(ranged(f, "idle-timeout", 1, 86400));
  scfg.queue.max_frames = static_cast<std::size_t>(ranged(f, "queue-frames", 1, 1 << 24));
  scfg.queue.max_bytes = static_cast<std::size_t>(ranged(f, "queue-bytes", 1024, 1LL << 32));
  scfg.socket_send_buffer = static_cast<int>(ranged(f, "send-buffer", 0, 1 << 30));
  scfg.io_threads = static_cast<int>(ranged(f, "io-threads", 1, 64));
  engine::EngineConfig ecfg;
  ecfg.max_queue = static_cast<int>(ranged(f, "max-queue", 0, 1 << 20));
  ecfg.max_inflight_per_session = static_cast<int>(ranged(f, "max-inflight", 1, 1 << 16));
  ecfg.request_timeout_ms = static_cast<uint32_t>(ranged(f, "request-timeout", 0, 86400) * 1000);
  ecfg.prefix_cache = !f.has("no-prefix-cache");
  if (f.has("step-log")) ecfg.step_log = f.str("step-log");
  ecfg.plan_ahead = !f.has("no-plan-ahead");
  ecfg.limits.max_frame_bytes =
      static_cast<std::size_t>(ranged(f, "max-frame-bytes", 256, 1 << 28));
  const int slots = f.has("max-slots") ? static_cast<int>(ranged(f, "max-slots", 1, 256))
                    : device == "cuda" ? 16
                                       : 4;
  const int gpu_index = static_cast<int>(ranged(f, "gpu", 0, 1024));
  const int kv_block = static_cast<int>(ranged(f, "kv-block", 1, 4096));
  if (f.has("max-step-tokens")) {
    ecfg.max_step_tokens = static_cast<int>(ranged(f, "max-step-tokens", 1, 1 << 20));
    if (ecfg.max_step_tokens < slots)
      throw Error("--max-step-tokens " + std::to_string(ecfg.max_step_tokens) +
                  " is less than --max-slots " + std::to_string(slots) +
                  ": every running request takes one token of each step");
  }
  if (f.has("idle-step-tokens"))
    ecfg.idle_step_tokens = static_cast<int>(ranged(f, "idle-step-tokens", 1, 1 << 20));
  double kv_fraction = 0.9;
  try {
    kv_fraction = std::stod(f.str("kv-fraction"));
  } catch (const std::exception&) {
    kv_fraction = -1;
  }
  if (!(kv_fraction > 0.0 && kv_fraction <= 1.0))
    throw Error("--kv-fraction: expected a number in (0, 1], got '" + f.str("kv-fraction") + "'");
  const int threads = static_cast<int>(ranged(f, "threads", 0, 1024));
  const auto drain = std::chrono::seconds(ranged(f, "drain-seconds", 0, 3600));

  // SIGINT/SIGTERM are taken by sigwait below; block them before any thread starts so that
  // every thread (CAF's, the executor's, the network's) inherits the mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  const LoadedModel lm = load_model(f.str("model"));
  const std::shared_ptr<const ModelFile>& mf = lm.file;
  const std::shared_ptr<Tokenizer>& tok = lm.tokenizer;
  const ModelConfig& cfg = mf->config();
  int ctx = default_context(cfg);
  if (f.has("ctx")) ctx = static_cast<int>(ranged(f, "ctx", 1, 1 << 24));

  // The model's template, its architecture's family where the file has none (as rz generate
  // --chat), or --template NAME; a model with none of them serves prompts only.
  std::optional<ChatTemplate> chat;
  if (f.has("template")) {
    try {
      chat = chat_template_for(*mf, *tok, f.str("template"));
    } catch (const Error& e) {
      throw Error(std::string("--template: ") + e.what());
    }
  } else {
    try {
      chat = chat_template_for(*mf, *tok);
    } catch (const Error& e) {
      std::fprintf(stderr, "rz serve: warning: %s; chat requests (messages) will be refused\n",
                   e.what());
    }
  }

  BuiltExecutor built = make_executor(device, mf,
                                      {.slots = slots,
                                       .max_context = ctx,
                                       .threads = threads,
                                       .gpu = gpu_index,
                                       .kv_block_size = kv_block,
                                       .kv_fraction = kv_fraction,
                                       .int8_activations = f.has("int8-activations"),
                                       .fp8_weights = fp8_weights_flag(f.str("weights")),
                                       .fp16_copies = !f.has("no-fp16-copies"),
                                       .tune_gemm = !f.has("no-gemm-tune"),
                                       .graphs_in_background = !f.has("inline-graphs")});
  if (f.has("int8-activations") && device != "cuda")
    std::fprintf(stderr,
                 "rz serve: warning: --int8-activations applies to the CUDA executor only\n");
  std::unique_ptr<Executor> executor = std::move(built.executor);
  if (!built.memory_plan.empty())
    std::fprintf(stderr, "rz serve: memory plan: %s\n", built.memory_plan.c_str());
  std::fprintf(stderr,
               "rz serve: model %s (%s, %d layers, vocab %d), device %s%s, %d slots, context %d "
               "tokens per slot, chat template %s\n",
               mf->path().c_str(), arch_name(cfg.arch), cfg.n_layer, cfg.n_vocab,
               built.description.c_str(), why_cpu.c_str(), executor->max_slots(),
               executor->max_context(), chat ? chat->name().c_str() : "none");
  scfg.model_name = base_name(mf->path());
  if (f.has("served-model-name")) scfg.served_model_name = f.str("served-model-name");

  caf::actor_system_config caf_cfg;
  caf::actor_system system{caf_cfg};
  {
    std::shared_ptr<engine::Engine> eng =
        engine::Engine::start(system, std::move(executor), tok, std::move(chat), ecfg);
    // Open files: the limit raised to the hard one; the sockets capped below what is left, and
    // --max-connections below that, keeping room for plain HTTP (/health, the page).
    const net::FdBudget fds = net::raise_fd_limit();
    if (fds.socket_cap < 8)
      throw Error("the open-file limit (" + std::to_string(fds.soft) + ", " +
                  std::to_string(fds.open_now) +
                  " in use) leaves too few for connections; "
                  "raise it (ulimit -n)");
    scfg.max_open_sockets = fds.socket_cap;
    const int ws_cap = fds.socket_cap - std::max(4, fds.socket_cap / 8);
    std::fprintf(stderr, "rz serve: open-file limit %ld%s, %d in use: at most %d sockets\n",
                 fds.soft,
                 fds.soft != fds.soft_before
                     ? (" (raised from " + std::to_string(fds.soft_before) + ")").c_str()
                     : "",
                 fds.open_now, fds.socket_cap);
    if (scfg.max_connections > ws_cap) {
      std::fprintf(stderr,
                   "rz serve: --max-connections lowered from %d to %d to fit the open-file "
                   "limit\n",
                   scfg.max_connections, ws_cap);
      scfg.max_connections = ws_cap;
    }
    net::Server server(eng, scfg);
    server.start();
    if (!scfg.api_keys.empty())
      std::fprintf(stderr, "rz serve: %zu API key(s): the OpenAI API, the WebSocket%s need one\n",
                   scfg.api_keys.size(), scfg.metrics_public ? "" : " and /metrics");
    if (!tls_line.empty())
      std::fprintf(stderr, "rz serve: TLS: %s (%s)\n", tls_line.c_str(),
                   scfg.tls_cert_file.c_str());
    std::fprintf(stderr, "rz serve: listening on %s://%s:%u/ — open it in a browser\n",
                 scfg.tls_cert_file.empty() ? "http" : "https", scfg.host.c_str(),
                 static_cast<unsigned>(server.port()));
    std::fflush(stderr);

    int sig = 0;
    sigwait(&sigs, &sig);
    std::fprintf(stderr,
                 "rz serve: %s: stopping (draining for up to %lld s; send it again to "
                 "stop at once)\n",
                 sig == SIGINT ? "SIGINT" : "SIGTERM", static_cast<long long>(drain.count()));
    std::fflush(stderr);
    // A second SIGINT/SIGTERM during the drain ends the process at once (exit 128 + signal).
    std::thread([sigs] {
      int again = 0;
      sigwait(&sigs, &again);
      std::fprintf(stderr, "rz serve: %s again: exiting now\n",
                   again == SIGINT ? "SIGINT" : "SIGTERM");
      std::fflush(stderr);
      _exit(128 + again);
    }).detach();
    server.shutdown(drain);
    const net::NetStats st = server.stats();
    std::fprintf(stderr, "rz serve: stopped after %llu connections\n",
                 static_cast<unsigned long long>(st.connections_total));
  }
  return 0;
}

}  // namespace rz::cmd
