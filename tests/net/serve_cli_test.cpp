// The real `rz serve` binary (RZ_BIN) end to end: start it on an ephemeral port (--port 0 prints
// the chosen port), answer a chat request through examples/chat_client.py and through the
// official openai package (tests/net/openai_client.py) and compare the text with `rz generate`
// on the same settings, /health, then SIGTERM -> exit 0. Also the browser
// page in headless Chromium (tests/net/page_browser.py), keyless and behind --api-key, a foreign
// page refused there (page_origin_browser.py), the --device errors, a low open-file limit, a
// second signal during the drain, and rz-wsbench over both of its protocols (--api ws|openai)
// against a server that needs a key.
// TLS: the --tls-cert/--tls-key errors, and HTTPS and WSS to Python's clients.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <simdjson.h>

#include "apps/executor_factory.hpp"
#include "bench/wsbench_workload.hpp"
#include "tests/net/test_certificate.hpp"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

using namespace std::chrono_literals;
const std::string kModel = RZ_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
const std::string kPython = RZ_SOURCE_DIR "/.venv/bin/python";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string tmp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("rz_net_" + std::to_string(getpid()) + "_" + name))
      .string();
}

// Spawns `argv` with stdout and stderr to files; returns the pid.
pid_t spawn(const std::vector<std::string>& args, const std::string& out, const std::string& err) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

// Waits for `pid` up to `limit`; returns its exit status, or -1 (then it is killed).
int wait_exit(pid_t pid, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  int st = 0;
  while (std::chrono::steady_clock::now() < until) {
    if (waitpid(pid, &st, WNOHANG) == pid)
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    std::this_thread::sleep_for(20ms);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  return -1;
}

struct ProcResult {
  int code;
  std::string out, err;
};

ProcResult run(const std::vector<std::string>& args, std::chrono::milliseconds limit = 120s) {
  const std::string out = tmp_path("out"), err = tmp_path("err");
  const pid_t pid = spawn(args, out, err);
  if (pid < 0) return {-1, "", "spawn failed: " + args[0]};
  ProcResult r{wait_exit(pid, limit), slurp(out), slurp(err)};
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  return r;
}

// Starts `rz serve` with `args` (after the model, --port 0) under `prefix` (e.g. prlimit) and
// waits for its port; 0 when it did not print one within a minute (then it is killed).
struct Served {
  pid_t pid = -1;
  int port = 0;
  std::string err;  // its stderr file
};
Served serve_with(const std::vector<std::string>& args, const std::vector<std::string>& prefix = {},
                  const std::string& model = kModel) {
  Served s;
  s.err = tmp_path("serve_err_" + std::to_string(std::rand()));
  std::vector<std::string> all = prefix;
  for (const std::string& a : {std::string(RZ_BIN), std::string("serve"), std::string("--model"),
                               model, std::string("--port"), std::string("0")})
    all.push_back(a);
  all.insert(all.end(), args.begin(), args.end());
  s.pid = spawn(all, "/dev/null", s.err);
  const std::regex listening(R"(listening on https?://127\.0\.0\.1:(\d+)/)");
  for (auto until = std::chrono::steady_clock::now() + 60s;
       s.pid > 0 && std::chrono::steady_clock::now() < until;) {
    std::smatch m;
    const std::string log = slurp(s.err);
    if (std::regex_search(log, m, listening)) {
      s.port = std::stoi(m[1]);
      return s;
    }
    if (waitpid(s.pid, nullptr, WNOHANG) == s.pid) {
      s.pid = -1;
      return s;
    }
    std::this_thread::sleep_for(50ms);
  }
  if (s.pid > 0) {
    kill(s.pid, SIGKILL);
    waitpid(s.pid, nullptr, 0);
    s.pid = -1;
  }
  return s;
}

// A TCP connection to 127.0.0.1:port (blocking connect; -1 on failure).
int connect_loopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// GET /health over a fresh connection: the status line and body, "" on failure.
std::string get_health(int port) {
  const int fd = connect_loopback(port);
  if (fd < 0) return "";
  const std::string req = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  if (write(fd, req.data(), req.size()) != ssize_t(req.size())) {
    close(fd);
    return "";
  }
  std::string all;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) all.append(buf, std::size_t(n));
  close(fd);
  return all;
}

// User + system CPU seconds of `pid` so far.
double cpu_seconds(pid_t pid) {
  std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  const auto close_paren = stat.rfind(')');
  if (close_paren == std::string::npos) return -1;
  std::istringstream in(stat.substr(close_paren + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {  // fields 14 and 15: utime, stime (ticks)
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return double(utime + stime) / double(sysconf(_SC_CLK_TCK));
}

class ServeCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(RZ_BIN)) << RZ_BIN << " is missing: build the rz target";
    ASSERT_TRUE(std::filesystem::exists(kModel)) << kModel << " is missing: run scripts/setup.sh";
  }
};

TEST_F(ServeCliTest, ServesAChatAnswerThenExitsZeroOnSigterm) {
  ASSERT_TRUE(std::filesystem::exists(kPython)) << kPython << " is missing: run scripts/setup.sh";
  const std::string out = tmp_path("serve_out"), err = tmp_path("serve_err");
  const pid_t pid = spawn({RZ_BIN, "serve", "--model", kModel, "--port", "0", "--max-slots", "2",
                           "--ctx", "1024", "--drain-seconds", "5"},
                          out, err);
  ASSERT_GT(pid, 0);
  // The port, from the "listening on" line.
  int port = 0;
  std::string log;
  const std::regex listening(R"(listening on http://127\.0\.0\.1:(\d+)/ — open it in a browser)");
  for (auto until = std::chrono::steady_clock::now() + 60s;
       port == 0 && std::chrono::steady_clock::now() < until;) {
    log = slurp(err);
    std::smatch m;
    if (std::regex_search(log, m, listening))
      port = std::stoi(m[1]);
    else
      std::this_thread::sleep_for(50ms);
  }
  if (port == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    FAIL() << "no listening line; stderr:\n" << log;
  }
  EXPECT_NE(log.find("2 slots"), std::string::npos) << log;
  EXPECT_NE(log.find("context 1024"), std::string::npos) << log;
  EXPECT_NE(log.find("device cpu"), std::string::npos) << log;

  // The example client streams a greedy chat answer; rz generate gives the same text.
  const std::string q = "What is the capital of France?";
  const ProcResult client = run({kPython, RZ_SOURCE_DIR "/examples/chat_client.py", "--url",
                                 "ws://127.0.0.1:" + std::to_string(port) + "/v1/ws",
                                 "--temperature", "0", "--max-tokens", "20", q});
  const ProcResult gen = run({RZ_BIN, "generate", "--model", kModel, "--chat", "--prompt", q,
                              "--temperature", "0", "--max-tokens", "20", "--ctx", "1024"});
  EXPECT_EQ(client.code, 0) << client.err;
  EXPECT_EQ(gen.code, 0) << gen.err;
  EXPECT_FALSE(gen.out.empty());
  EXPECT_EQ(client.out, gen.out + "\n");  // the client ends the answer with a newline
  EXPECT_NE(client.err.find("tokens"), std::string::npos) << client.err;

  // The official openai package against the OpenAI-compatible API, the same answer.
  const ProcResult oa = run({kPython, RZ_SOURCE_DIR "/tests/net/openai_client.py",
                             "http://127.0.0.1:" + std::to_string(port) + "/v1", gen.out},
                            180s);
  EXPECT_EQ(oa.code, 0) << oa.out << oa.err;
  EXPECT_NE(oa.out.find("all checks passed"), std::string::npos) << oa.out << oa.err;

  const ProcResult health =
      run({"/usr/bin/env", "python3", "-c",
           "import urllib.request,sys;print(urllib.request.urlopen("
           "'http://127.0.0.1:" +
               std::to_string(port) + "/health',timeout=10).read().decode())"});
  EXPECT_NE(health.out.find("\"status\":\"ok\""), std::string::npos) << health.out << health.err;

  kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid, 30s), 0) << slurp(err);
  EXPECT_NE(slurp(err).find("SIGTERM"), std::string::npos);
  std::filesystem::remove(out);
  std::filesystem::remove(err);
}

// A GGUF without tokenizer.chat_template (gemma-3-270m's conversion has none): rz serve chats in
// its architecture's family, as rz generate --chat does, with the same greedy answer; --template
// NAME picks a family, and an unknown name is a startup error.
TEST_F(ServeCliTest, ChatWithoutATemplateInTheFileUsesItsFamily) {
  const std::string gemma = RZ_SOURCE_DIR "/models/gemma-3-270m-q4_k_m.gguf";
  ASSERT_TRUE(std::filesystem::exists(gemma)) << gemma << " is missing: run scripts/setup.sh";
  const std::string q = "What is the capital of France?";
  const ProcResult gen = run({RZ_BIN, "generate", "--model", gemma, "--chat", "--prompt", q,
                              "--temperature", "0", "--max-tokens", "8", "--ctx", "512"});
  ASSERT_EQ(gen.code, 0) << gen.err;
  ASSERT_FALSE(gen.out.empty());
  Served s = serve_with({"--ctx", "512", "--max-slots", "1"}, {}, gemma);
  ASSERT_GT(s.port, 0) << slurp(s.err);
  EXPECT_NE(slurp(s.err).find("chat template gemma"), std::string::npos) << slurp(s.err);
  const std::string post =
      "import json,sys,urllib.request\n"
      "r=urllib.request.Request('http://127.0.0.1:" +
      std::to_string(s.port) +
      "/v1/chat/completions',data=json.dumps({'messages':[{'role':'user','content':sys.argv[1]}],"
      "'max_tokens':8,'temperature':0}).encode(),headers={'Content-Type':'application/json'})\n"
      "sys.stdout.write(json.load(urllib.request.urlopen(r,timeout=60))['choices'][0]['message']"
      "['content'])\n";
  const ProcResult chat = run({"/usr/bin/env", "python3", "-c", post, q});
  kill(s.pid, SIGTERM);
  int status = 0;
  waitpid(s.pid, &status, 0);
  EXPECT_EQ(chat.code, 0) << chat.err;
  EXPECT_EQ(chat.out, gen.out);

  const ProcResult bad = run({RZ_BIN, "serve", "--model", gemma, "--template", "nonsense"});
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("--template: unknown chat template 'nonsense'"), std::string::npos)
      << bad.err;
}

TEST_F(ServeCliTest, DeviceFlag) {
  if (!rz::cuda_available()) {  // here: a clear error, no crash
    const ProcResult cuda = run({RZ_BIN, "serve", "--model", kModel, "--device", "cuda"});
    EXPECT_EQ(cuda.code, 1);
    EXPECT_NE(cuda.err.find(RZ_HAVE_CUDA ? "no CUDA device" : "this build of rz has no CUDA"),
              std::string::npos)
        << cuda.err;
  }
  const ProcResult frac = run({RZ_BIN, "serve", "--model", kModel, "--kv-fraction", "1.5"});
  EXPECT_EQ(frac.code, 1);
  EXPECT_NE(frac.err.find("--kv-fraction"), std::string::npos) << frac.err;
  const ProcResult bad = run({RZ_BIN, "serve", "--model", kModel, "--device", "tpu"});
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("--device"), std::string::npos) << bad.err;
  const ProcResult bad_port = run({RZ_BIN, "serve", "--model", kModel, "--port", "70000"});
  EXPECT_EQ(bad_port.code, 1);
  EXPECT_NE(bad_port.err.find("--port"), std::string::npos) << bad_port.err;
}

TEST_F(ServeCliTest, BadNetworkFlagsAreErrors) {
  const ProcResult origin = run(
      {RZ_BIN, "serve", "--model", kModel, "--allowed-origins", "http://ok.example,example.com"});
  EXPECT_EQ(origin.code, 1);
  EXPECT_NE(origin.err.find("--allowed-origins: 'example.com' is not an origin"), std::string::npos)
      << origin.err;
  const ProcResult per_ip =
      run({RZ_BIN, "serve", "--model", kModel, "--max-connections-per-ip", "0"});
  EXPECT_EQ(per_ip.code, 1);
  EXPECT_NE(per_ip.err.find("--max-connections-per-ip"), std::string::npos) << per_ip.err;
  const ProcResult first = run({RZ_BIN, "serve", "--model", kModel, "--first-frame-timeout", "-1"});
  EXPECT_EQ(first.code, 1);
  EXPECT_NE(first.err.find("--first-frame-timeout"), std::string::npos) << first.err;
}

TEST_F(ServeCliTest, PortInUseIsAnError) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const std::string port = std::to_string(ntohs(a.sin_port));
  const ProcResult r = run({RZ_BIN, "serve", "--model", kModel, "--port", port, "--ctx", "256"});
  close(fd);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("127.0.0.1:" + port + ": Address already in use"), std::string::npos)
      << r.err;
}

TEST_F(ServeCliTest, BrowserPageStreamsInHeadlessChromium) {
  ASSERT_TRUE(std::filesystem::exists(kPython)) << kPython << " is missing: run scripts/setup.sh";
  const std::string shot = RZ_BINARY_DIR "/screenshot-page.png";
  const ProcResult r =
      run({kPython, RZ_SOURCE_DIR "/tests/net/page_browser.py", RZ_BIN, kModel, shot}, 180s);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_GT(std::filesystem::exists(shot) ? std::filesystem::file_size(shot) : 0, 10000u);
}

// Behind `rz serve --api-key`: the page says it needs the key (and that a wrong one was refused),
// then streams an answer once the key is typed in, keeps it over a reload (sessionStorage), and
// never puts it in the URL or localStorage (tests/net/page_browser.py --api-key).
TEST_F(ServeCliTest, BrowserPageAsksForTheApiKeyInHeadlessChromium) {
  ASSERT_TRUE(std::filesystem::exists(kPython)) << kPython << " is missing: run scripts/setup.sh";
  const std::string shot = RZ_BINARY_DIR "/screenshot-page-key.png";
  const ProcResult r = run({kPython, RZ_SOURCE_DIR "/tests/net/page_browser.py", RZ_BIN, kModel,
                            shot, "--api-key", "page-test.Key_42~"},
                           240s);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("asked for the key"), std::string::npos) << r.out << r.err;
  EXPECT_GT(std::filesystem::exists(shot) ? std::filesystem::file_size(shot) : 0, 10000u);
}

// Hostile clients against a real rz serve (tests/net/hostile_clients.py: idle connections by
// the thousand, a whole per-address quota, a client that never reads, floods, size limits,
// fragments, invalid UTF-8, deep JSON, a 10,000-request burst, slowloris, pipelining, and
// disconnects at every stage), each beside a well-behaved client: each gets what it should, the
// file handles and /metrics return to idle, and the bystander is served throughout. The bounds
// here are loose (CI's machine is shared and may run a sanitizer build); scripts/hostile_clients.sh
// runs the strict ones (docs/reliability.md).
TEST_F(ServeCliTest, HostileClientsLeaveTheServerServingOthers) {
  ASSERT_TRUE(std::filesystem::exists(kPython)) << kPython << " is missing: run scripts/setup.sh";
  const ProcResult r =
      run({kPython, RZ_SOURCE_DIR "/tests/net/hostile_clients.py", RZ_BIN, kModel, "--ttft-factor",
           "5", "--ttft-slack-ms", "200", "--rss-slack-mb", "1024"},
          600s);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("12 passed, 0 failed"), std::string::npos) << r.out << r.err;
}

// All of it at once: the page over HTTPS (a self-signed test certificate the browser is told to
// accept) opens its WebSocket over WSS by itself, asks for the key, and streams an answer.
TEST_F(ServeCliTest, BrowserPageOverTlsWithAKeyInHeadlessChromium) {
  ASSERT_TRUE(std::filesystem::exists(kPython)) << kPython << " is missing: run scripts/setup.sh";
  const rz::net::testing::TestCertificate& c = rz::net::testing::test_certificate();
  const std::string shot = RZ_BINARY_DIR "/screenshot-page-tls.png";
  const ProcResult r = run({kPython, RZ_SOURCE_DIR "/tests/net/page_browser.py", RZ_BIN, kModel,
                            shot, "--api-key", "tls-page-key", "--tls", c.cert_file, c.key_file},
                           240s);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("over TLS (https, wss), asked for the key"), std::string::npos)
      << r.out << r.err;
}

// rz-wsbench (RZ_BINARY_DIR/rz-wsbench) against a real server that needs a key: the OpenAI API
// streamed (completions and chat, closed and open loop) and the WebSocket, read from --json. Both
// protocols send the same requests (the same prompt tokens by the server's usage) and count every
// token (ignore_eos: max_tokens each); a wrong key fails every request with invalid_api_key; a
// keep-alive connection the server closed while it idled is reopened without an error.
TEST_F(ServeCliTest, WsbenchMeasuresTheOpenAiApiAndTheWebSocket) {
  const std::string bench = RZ_BINARY_DIR "/rz-wsbench";
  ASSERT_TRUE(std::filesystem::exists(bench)) << bench << " is missing: build rz-wsbench";
  // A first-request timeout of 1 s closes idle keep-alive connections opened at setup.
  const Served s = serve_with(
      {"--max-slots", "2", "--ctx", "512", "--api-key", "bench-key", "--first-frame-timeout", "1"});
  ASSERT_GT(s.pid, 0) << slurp(s.err);
  const std::string port = std::to_string(s.port);
  const std::string http_url = "http://127.0.0.1:" + port + "/v1";
  const std::string ws_url = "ws://127.0.0.1:" + port + "/v1/ws";

  struct Run {
    ProcResult r;
    simdjson::dom::parser parser;
    simdjson::dom::element doc;
    uint64_t u(const char* pointer) {
      uint64_t v = 0;
      EXPECT_EQ(doc.at_pointer(pointer).get_uint64().get(v), simdjson::SUCCESS) << pointer;
      return v;
    }
  };
  auto bench_run = [&](std::vector<std::string> args, Run& run_out) {
    args.insert(args.begin(), bench);
    args.push_back("--json");
    run_out.r = run(args, 120s);
    ASSERT_EQ(run_out.parser.parse(run_out.r.out).get(run_out.doc), simdjson::SUCCESS)
        << run_out.r.out << run_out.r.err;
  };

  // OpenAI completions, closed loop, 2 connections: 4 requests of 12 tokens each.
  Run oa;
  bench_run({"--api", "openai", "--url", http_url, "--api-key", "bench-key", "--connections", "2",
             "--requests", "4", "--prompt-tokens", "8", "--max-tokens", "12"},
            oa);
  EXPECT_EQ(oa.r.code, 0) << oa.r.out << oa.r.err;
  EXPECT_EQ(std::string(oa.doc["config"]["api"].get_string().value()), "openai");
  EXPECT_EQ(oa.u("/completed"), 4u) << oa.r.out;
  EXPECT_EQ(oa.u("/failed"), 0u) << oa.r.out << oa.r.err;
  EXPECT_EQ(oa.u("/total_output_tokens"), 48u);
  EXPECT_EQ(oa.u("/ttft_ms/count"), 4u);
  EXPECT_EQ(oa.u("/itl_ms/count"), 44u);  // tokens - 1 per request
  EXPECT_EQ(oa.u("/tpot_ms/count"), 4u);
  EXPECT_EQ(oa.u("/e2e_ms/count"), 4u);
  EXPECT_EQ(oa.u("/server_ttft_ms/count"), 0u);  // the WebSocket's own timings only
  EXPECT_EQ(oa.u("/finish_reasons/length"), 4u);
  EXPECT_EQ(oa.u("/usage_mismatches"), 0u);
  EXPECT_EQ(oa.u("/protocol_violations"), 0u);
  EXPECT_EQ(oa.u("/connect_failures"), 0u);
  EXPECT_GT(oa.u("/total_input_tokens"), 4u * 8u - 1u);

  // The WebSocket with the same workload: refused without a key (HTTP 401 at the upgrade), then
  // with the key from RZ_API_KEY: the same prompts and tokens.
  const std::vector<std::string> ws_args = {"--url",        ws_url, "--connections",   "2",
                                            "--requests",   "4",    "--prompt-tokens", "8",
                                            "--max-tokens", "12",   "--json"};
  std::vector<std::string> no_key = {"/usr/bin/env", "-u", "RZ_API_KEY", bench};
  no_key.insert(no_key.end(), ws_args.begin(), ws_args.end());
  const ProcResult refused = run(no_key, 60s);
  EXPECT_EQ(refused.code, 1) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("WebSocket handshake refused: HTTP 401"), std::string::npos)
      << refused.err;
  Run ws_key;
  std::vector<std::string> env_key = {"/usr/bin/env", "RZ_API_KEY=bench-key", bench};
  env_key.insert(env_key.end(), ws_args.begin(), ws_args.end());
  ws_key.r = run(env_key, 120s);
  ASSERT_EQ(ws_key.parser.parse(ws_key.r.out).get(ws_key.doc), simdjson::SUCCESS)
      << ws_key.r.out << ws_key.r.err;
  EXPECT_EQ(ws_key.r.code, 0) << ws_key.r.err;
  EXPECT_EQ(std::string(ws_key.doc["config"]["api"].get_string().value()), "ws");
  EXPECT_EQ(ws_key.u("/completed"), 4u);
  EXPECT_EQ(ws_key.u("/total_output_tokens"), 48u);
  EXPECT_EQ(ws_key.u("/itl_ms/count"), 44u);
  EXPECT_EQ(ws_key.u("/server_ttft_ms/count"), 4u);
  EXPECT_EQ(ws_key.u("/total_input_tokens"), oa.u("/total_input_tokens"));

  // Chat: /v1/chat/completions, the chat template around the same prompts (more prompt tokens).
  Run chat;
  bench_run({"--api", "openai", "--url", http_url, "--api-key", "bench-key", "--chat", "--requests",
             "2", "--prompt-tokens", "8", "--max-tokens", "6"},
            chat);
  EXPECT_EQ(chat.r.code, 0) << chat.r.out << chat.r.err;
  EXPECT_EQ(chat.u("/completed"), 2u);
  EXPECT_EQ(chat.u("/total_output_tokens"), 12u);
  EXPECT_EQ(chat.u("/itl_ms/count"), 10u);
  EXPECT_EQ(chat.u("/protocol_violations"), 0u);
  EXPECT_GT(chat.u("/total_input_tokens"), 2u * 8u + 4u);

  // Open loop faster than one connection serves: more connections open, every request ends.
  Run open;
  bench_run({"--api", "openai", "--url", http_url, "--api-key", "bench-key", "--rate", "50",
             "--requests", "3", "--prompt-tokens", "8", "--max-tokens", "12"},
            open);
  EXPECT_EQ(open.r.code, 0) << open.r.out << open.r.err;
  EXPECT_EQ(open.u("/completed"), 3u) << open.r.out;
  EXPECT_EQ(open.u("/total_output_tokens"), 36u);
  EXPECT_NE(open.r.err.find("more connection(s) for arrivals"), std::string::npos) << open.r.err;

  // Open loop whose first arrival comes after the server closed the idle connection (1 s): the
  // request goes out again on a new connection, no error. The seed puts it 2 to 5 s in.
  uint64_t seed = 0;
  while (true) {
    rz::wsbench::PoissonArrivals a(0.5, seed);
    const double t = a.next();
    if (t > 2.0 && t < 5.0) break;
    ++seed;
  }
  Run stale;
  bench_run({"--api", "openai", "--url", http_url, "--api-key", "bench-key", "--rate", "0.5",
             "--requests", "1", "--seed", std::to_string(seed), "--prompt-tokens", "8",
             "--max-tokens", "4"},
            stale);
  EXPECT_EQ(stale.r.code, 0) << stale.r.out << stale.r.err;
  EXPECT_EQ(stale.u("/completed"), 1u) << stale.r.out << stale.r.err;
  EXPECT_EQ(stale.u("/failed"), 0u);
  EXPECT_EQ(stale.u("/connect_failures"), 0u);
  EXPECT_EQ(stale.r.err.find("lost"), std::string::npos) << stale.r.err;

  // A wrong key: every request fails with the server's code; exit 1.
  Run wrong;
  bench_run({"--api", "openai", "--url", http_url, "--api-key", "wrong-key", "--requests", "2",
             "--prompt-tokens", "4", "--max-tokens", "4"},
            wrong);
  EXPECT_EQ(wrong.r.code, 1);
  EXPECT_EQ(wrong.u("/errors/invalid_api_key"), 2u) << wrong.r.out;
  EXPECT_EQ(wrong.u("/completed"), 0u);
  EXPECT_NE(wrong.r.err.find("HTTP 401"), std::string::npos) << wrong.r.err;

  kill(s.pid, SIGTERM);
  EXPECT_EQ(wait_exit(s.pid, 30s), 0) << slurp(s.err);
  std::filesystem::remove(s.err);
}

// The server goes away mid-run: rz-wsbench (either protocol) counts the running requests as
// connection_lost, tries to reconnect a few times, and ends well before its --timeout.
TEST_F(ServeCliTest, WsbenchEndsSoonWhenTheServerGoesAway) {
  const std::string bench = RZ_BINARY_DIR "/rz-wsbench";
  ASSERT_TRUE(std::filesystem::exists(bench)) << bench << " is missing: build rz-wsbench";
  const Served s = serve_with({"--max-slots", "2", "--ctx", "512"});
  ASSERT_GT(s.pid, 0) << slurp(s.err);
  const std::string port = std::to_string(s.port);
  struct Client {
    std::string out, err;
    pid_t pid = -1;
  };
  std::vector<Client> clients(2);
  for (std::size_t i = 0; i < clients.size(); ++i) {
    Client& c = clients[i];
    c.out = tmp_path("gone_out" + std::to_string(i));
    c.err = tmp_path("gone_err" + std::to_string(i));
    std::vector<std::string> args = {bench, "--requests",      "100", "--max-tokens",
                                     "64",  "--prompt-tokens", "8",   "--timeout",
                                     "120", "--json"};
    if (i == 0) {
      args.insert(args.end(), {"--url", "ws://127.0.0.1:" + port + "/v1/ws"});
    } else {
      args.insert(args.end(), {"--api", "openai", "--url", "http://127.0.0.1:" + port + "/v1"});
    }
    c.pid = spawn(args, c.out, c.err);
    ASSERT_GT(c.pid, 0);
  }
  std::this_thread::sleep_for(1500ms);  // both have requests running
  kill(s.pid, SIGKILL);
  waitpid(s.pid, nullptr, 0);
  const auto t0 = std::chrono::steady_clock::now();
  for (Client& c : clients) {
    const int code = wait_exit(c.pid, 60s);
    EXPECT_TRUE(code == 0 || code == 1) << code << "\n" << slurp(c.err);
    const std::string out = slurp(c.out), err = slurp(c.err);
    EXPECT_EQ(err.find("timed out"), std::string::npos) << err;
    EXPECT_NE(out.find("\"connection_lost\":"), std::string::npos) << out << err;
    std::filesystem::remove(c.out);
    std::filesystem::remove(c.err);
  }
  // Five reconnects with back-off take about 6 s; far from the 120 s bound.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 30s);
  std::filesystem::remove(s.err);
}

// Under a 128 open-file limit the server caps its sockets below what is left (and says so),
// refuses sockets past the cap at accept instead of spinning on EMFILE, closes the silent ones
// after the first-frame timeout, and /health answers again.
TEST_F(ServeCliTest, LowOpenFileLimitCapsSocketsWithoutSpinning) {
  if (!std::filesystem::exists("/usr/bin/prlimit")) GTEST_SKIP() << "no /usr/bin/prlimit";
  const Served s = serve_with({"--max-slots", "1", "--ctx", "256", "--first-frame-timeout", "2"},
                              {"/usr/bin/prlimit", "--nofile=128:128"});
  ASSERT_GT(s.pid, 0) << slurp(s.err);
  const std::string log = slurp(s.err);
  EXPECT_NE(log.find("open-file limit 128"), std::string::npos) << log;
  EXPECT_NE(log.find("--max-connections lowered from 256 to"), std::string::npos) << log;
  EXPECT_NE(get_health(s.port).find("200 OK"), std::string::npos);

  std::vector<int> idle;  // more idle connections than the process has descriptors
  for (int i = 0; i < 200; ++i) {
    const int fd = connect_loopback(s.port);
    if (fd >= 0) idle.push_back(fd);
  }
  EXPECT_GT(idle.size(), 128u);
  std::this_thread::sleep_for(500ms);
  const double cpu0 = cpu_seconds(s.pid);
  std::this_thread::sleep_for(1s);
  const double busy = cpu_seconds(s.pid) - cpu0;
  EXPECT_LT(busy, 0.15) << "the server used " << busy << " s of CPU in 1 s with idle sockets";
  // The accepted silent ones are closed after 2 s (the rest were refused at accept): a fresh
  // connection gets /health, while our idle sockets are still open on this side.
  std::string health;
  for (auto until = std::chrono::steady_clock::now() + 6s;
       health.find("200 OK") == std::string::npos && std::chrono::steady_clock::now() < until;) {
    std::this_thread::sleep_for(200ms);
    health = get_health(s.port);
  }
  EXPECT_NE(health.find("\"status\":\"ok\""), std::string::npos) << health;
  for (int fd : idle) close(fd);
  kill(s.pid, SIGTERM);
  EXPECT_EQ(wait_exit(s.pid, 30s), 0) << slurp(s.err);
  std::filesystem::remove(s.err);
}

// SIGTERM starts the drain; a second SIGTERM during it ends the process at once (128 + 15).
TEST_F(ServeCliTest, SecondSignalDuringTheDrainExitsAtOnce) {
  ASSERT_TRUE(std::filesystem::exists(kPython)) << kPython << " is missing: run scripts/setup.sh";
  const Served s = serve_with({"--max-slots", "1", "--ctx", "1024", "--drain-seconds", "60"});
  ASSERT_GT(s.pid, 0) << slurp(s.err);
  // A client with a long request running (so the drain has something to wait for).
  const std::string client_out = tmp_path("client_out");
  const std::string script =
      "import asyncio, json, websockets\n"
      "async def main():\n"
      "    async with websockets.connect('ws://127.0.0.1:" +
      std::to_string(s.port) +
      "/v1/ws') as ws:\n"
      "        await ws.send(json.dumps({'type': 'generate', 'id': 'a', 'prompt': 'Hello',\n"
      "                                  'max_tokens': 900, 'ignore_eos': True}))\n"
      "        print(await ws.recv(), flush=True)\n"
      "        await asyncio.sleep(120)\n"
      "asyncio.run(main())\n";
  const pid_t client = spawn({kPython, "-c", script}, client_out, "/dev/null");
  ASSERT_GT(client, 0);
  for (auto until = std::chrono::steady_clock::now() + 30s;
       slurp(client_out).find("token") == std::string::npos &&
       std::chrono::steady_clock::now() < until;)
    std::this_thread::sleep_for(50ms);
  EXPECT_NE(slurp(client_out).find("token"), std::string::npos);

  kill(s.pid, SIGTERM);
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(waitpid(s.pid, nullptr, WNOHANG), 0) << "exited before the second signal";
  const auto t0 = std::chrono::steady_clock::now();
  kill(s.pid, SIGTERM);
  EXPECT_EQ(wait_exit(s.pid, 3s), 128 + SIGTERM) << slurp(s.err);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  EXPECT_NE(slurp(s.err).find("SIGTERM again: exiting now"), std::string::npos) << slurp(s.err);
  kill(client, SIGKILL);
  waitpid(client, nullptr, 0);
  std::filesystem::remove(client_out);
  std::filesystem::remove(s.err);
}

// A page of another site (served on another port under a name Chromium resolves to 127.0.0.1)
// cannot open the WebSocket (403), the server's own page still can, and --allowed-origins lets
// the other page in (tests/net/page_origin_browser.py).
TEST_F(ServeCliTest, ForeignPageCannotOpenTheWebSocketInHeadlessChromium) {
  ASSERT_TRUE(std::filesystem::exists(kPython)) << kPython << " is missing: run scripts/setup.sh";
  const ProcResult r =
      run({kPython, RZ_SOURCE_DIR "/tests/net/page_origin_browser.py", RZ_BIN, kModel}, 180s);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
}

// --tls-cert and --tls-key go together, and a file that cannot be used stops rz serve at once
// (before the model loads) with one line naming it.
TEST_F(ServeCliTest, TlsFlagsNeedEachOtherAndUsableFiles) {
  const rz::net::testing::TestCertificate& c = rz::net::testing::test_certificate();
  auto serve = [&](const std::vector<std::string>& tls) {
    std::vector<std::string> args = {RZ_BIN, "serve", "--model", kModel};
    args.insert(args.end(), tls.begin(), tls.end());
    return run(args, 30s);
  };
  ProcResult r = serve({"--tls-cert", c.cert_file});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--tls-cert needs --tls-key"), std::string::npos) << r.err;
  r = serve({"--tls-key", c.key_file});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--tls-key needs --tls-cert"), std::string::npos) << r.err;
  r = serve({"--tls-cert", c.dir + "/missing.pem", "--tls-key", c.key_file});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("rz serve: error: " + c.dir +
                       "/missing.pem: cannot read the TLS certificate (--tls-cert): No such file "
                       "or directory"),
            std::string::npos)
      << r.err;
  r = serve({"--tls-cert", c.cert_file, "--tls-key", c.other_key_file});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("the private key does not match the certificate"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("rz serve: model"), std::string::npos) << "the model loaded first";
}

// rz serve with a certificate: the log says https, Python's websockets streams a chat answer over
// wss:// and the openai package the same answer over https:// (both trusting the test
// certificate), a plain HTTP request gets the 400 that names https, and SIGTERM exits 0.
TEST_F(ServeCliTest, ServesHttpsAndWssWithTlsFlags) {
  ASSERT_TRUE(std::filesystem::exists(kPython)) << kPython << " is missing: run scripts/setup.sh";
  const rz::net::testing::TestCertificate& c = rz::net::testing::test_certificate();
  const Served s = serve_with({"--tls-cert", c.cert_file, "--tls-key", c.key_file, "--max-slots",
                               "1", "--ctx", "512", "--drain-seconds", "5"});
  ASSERT_GT(s.pid, 0) << slurp(s.err);
  const std::string port = std::to_string(s.port);
  const std::string log = slurp(s.err);
  EXPECT_NE(log.find("listening on https://127.0.0.1:" + port + "/"), std::string::npos) << log;
  EXPECT_NE(log.find("TLS: subject CN=rz test, valid until"), std::string::npos) << log;

  const ProcResult ws =
      run({"/usr/bin/env", "SSL_CERT_FILE=" + c.cert_file, kPython,
           RZ_SOURCE_DIR "/examples/chat_client.py", "--url", "wss://127.0.0.1:" + port + "/v1/ws",
           "--temperature", "0", "--max-tokens", "8", "What is the capital of France?"});
  EXPECT_EQ(ws.code, 0) << ws.out << ws.err;
  EXPECT_GT(ws.out.size(), 1u) << ws.err;
  const std::string script =
      "import openai, sys\n"
      "client = openai.OpenAI(base_url='https://127.0.0.1:" +
      port +
      "/v1', api_key='unused',\n"
      "    max_retries=0, http_client=openai.DefaultHttpxClient(verify=sys.argv[1]))\n"
      "stream = client.chat.completions.create(model='any', max_tokens=8, temperature=0,\n"
      "    stream=True, messages=[{'role': 'user', 'content': 'What is the capital of France?'}])\n"
      "print(''.join(c.choices[0].delta.content or '' for c in stream if c.choices))\n";
  const ProcResult oa = run({kPython, "-c", script, c.cert_file}, 120s);
  EXPECT_EQ(oa.code, 0) << oa.out << oa.err;
  EXPECT_EQ(oa.out, ws.out);  // the same greedy answer, each ended with a newline

  const std::string plain = get_health(s.port);
  EXPECT_NE(plain.find("400 Bad Request"), std::string::npos) << plain;
  EXPECT_NE(plain.find("use https://"), std::string::npos) << plain;

  kill(s.pid, SIGTERM);
  EXPECT_EQ(wait_exit(s.pid, 30s), 0) << slurp(s.err);
  std::filesystem::remove(s.err);
}

}  // namespace
