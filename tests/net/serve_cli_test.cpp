// The real `rz serve` binary (RZ_BIN) end to end: start it on an ephemeral port (--port 0 prints
// the chosen port), answer a chat request through examples/chat_client.py and compare the text
// with `rz generate` on the same settings, /health, then SIGTERM -> exit 0. Also the browser
// page in headless Chromium (tests/net/page_browser.py) and the --device errors.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "gpu/device.hpp"

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
          ("rz_net_" + std::to_string(getpid()) + "_" + name)).string();
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
    if (waitpid(pid, &st, WNOHANG) == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
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
    if (std::regex_search(log, m, listening)) port = std::stoi(m[1]);
    else std::this_thread::sleep_for(50ms);
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
                          "ws://127.0.0.1:" + std::to_string(port) + "/v1/ws", "--temperature",
                          "0", "--max-tokens", "20", q});
  const ProcResult gen = run({RZ_BIN, "generate", "--model", kModel, "--chat", "--prompt", q,
                       "--temperature", "0", "--max-tokens", "20", "--ctx", "1024"});
  EXPECT_EQ(client.code, 0) << client.err;
  EXPECT_EQ(gen.code, 0) << gen.err;
  EXPECT_FALSE(gen.out.empty());
  EXPECT_EQ(client.out, gen.out + "\n");  // the client ends the answer with a newline
  EXPECT_NE(client.err.find("tokens"), std::string::npos) << client.err;

  const ProcResult health = run({"/usr/bin/env", "python3", "-c",
                          "import urllib.request,sys;print(urllib.request.urlopen("
                          "'http://127.0.0.1:" + std::to_string(port) +
                          "/health',timeout=10).read().decode())"});
  EXPECT_NE(health.out.find("\"status\":\"ok\""), std::string::npos) << health.out << health.err;

  kill(pid, SIGTERM);
  EXPECT_EQ(wait_exit(pid, 30s), 0) << slurp(err);
  EXPECT_NE(slurp(err).find("SIGTERM"), std::string::npos);
  std::filesystem::remove(out);
  std::filesystem::remove(err);
}

TEST_F(ServeCliTest, DeviceFlag) {
  if (rz::gpu::list_devices().empty()) {  // here: a clear error, no crash
    const ProcResult cuda = run({RZ_BIN, "serve", "--model", kModel, "--device", "cuda"});
    EXPECT_EQ(cuda.code, 1);
    EXPECT_NE(cuda.err.find("no CUDA device"), std::string::npos) << cuda.err;
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
  const ProcResult r = run({kPython, RZ_SOURCE_DIR "/tests/net/page_browser.py", RZ_BIN, kModel, shot},
                    180s);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_GT(std::filesystem::exists(shot) ? std::filesystem::file_size(shot) : 0, 10000u);
}

}  // namespace
