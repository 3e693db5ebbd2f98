// TLS on the server's port (net/tls.hpp, net/streams.hpp), in process with the test certificate
// made at run time (tests/net/test_certificate.hpp) and clients that verify it: HTTPS /health,
// /metrics and the OpenAI API whole and streamed (server-sent events), keep-alive after a stream,
// a vanished client noticed mid-stream, WSS generate to done, a graceful shutdown over WSS, API
// keys still required; and what must not work: plain HTTP or WebSocket to the TLS port (a 400
// that says so), a client stalled before or during the handshake (dropped at the first-frame
// timeout while others are served), garbage instead of a ClientHello, TLS 1.1. The context
// loading's errors: a missing file, no PEM inside, an encrypted key, a key of another certificate,
// only one of the two files.
#include <gtest/gtest.h>
#include <openssl/pem.h>
#include <simdjson.h>

#include <cstdio>
#include <future>

#include "formats/common.hpp"
#include "net/tls.hpp"
#include "tests/net/server_fixture.hpp"

namespace rz::net {
namespace {

const std::string kPrompt = "The capital of France is";

std::string post(const std::string& target, const std::string& body, bool keep_alive) {
  return "POST " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
         (keep_alive ? "" : "Connection: close\r\n") +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// The text of a completion: the whole response's choice, or a streamed one's chunks together.
std::string completion_text(const HttpResult& r) {
  simdjson::dom::parser p;
  simdjson::dom::element e;
  std::string text;
  if (r.headers.find("text/event-stream") == std::string::npos) {
    if (p.parse(r.body).get(e)) throw std::runtime_error("not JSON: " + r.body);
    return std::string(std::string_view(e["choices"].at(0)["text"]));
  }
  const std::vector<std::string> events = sse_events(r.body);
  EXPECT_EQ(events.back(), "[DONE]");
  for (std::size_t i = 0; i + 1 < events.size(); ++i) {
    if (p.parse(events[i]).get(e)) throw std::runtime_error("not JSON: " + events[i]);
    text += std::string_view(e["choices"].at(0)["text"]);
  }
  return text;
}

class TlsServerTest : public ServerTest {};

TEST_F(TlsServerTest, HealthMetricsAndCompletionsWholeAndStreamedOverHttps) {
  start_tls();
  HttpResult r = http_request(ep(), "/health");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.body.find("\"status\":\"ok\""), std::string::npos) << r.body;
  EXPECT_EQ(http_request(ep(), "/").status, 200);  // the page (it opens wss:// under https:)

  const std::string ref = greedy_text(kPrompt, 12);
  ASSERT_FALSE(ref.empty());
  const std::string body =
      R"({"prompt":"The capital of France is","max_tokens":12,"temperature":0)";
  r = http_send(ep(), "/v1/completions", body + "}");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.headers.find("Content-Type: application/json"), std::string::npos) << r.headers;
  EXPECT_EQ(completion_text(r), ref);

  r = http_send(ep(), "/v1/completions", body + R"(,"stream":true})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_NE(r.headers.find("Content-Type: text/event-stream"), std::string::npos) << r.headers;
  EXPECT_NE(r.headers.find("Transfer-Encoding: chunked"), std::string::npos) << r.headers;
  EXPECT_EQ(completion_text(r), ref);

  EXPECT_EQ(metric(metrics(), "rz_requests_started_total"), 2);
  EXPECT_EQ(metric(metrics(), "rz_tls_handshake_failures_total"), 0);

  // A body over --max-frame-bytes over TLS too: the 413, the rest of the body read and dropped.
  r = http_send(ep(), "/v1/completions", std::string(3 << 20, ' '));
  EXPECT_EQ(r.status, 413) << r.body;
  EXPECT_NE(r.body.find("\"too_large\""), std::string::npos) << r.body;
  EXPECT_EQ(http_request(ep(), "/health").status, 200);
}

// One TLS connection: a streamed response, then more requests on it (the read that watched for
// the client during the stream is cancelled and reading goes on), then a client that vanishes in
// the middle of a stream: its request is cancelled.
TEST_F(TlsServerTest, KeepAliveAfterAStreamAndAVanishedClientOverHttps) {
  start_tls();
  {
    ClientConn c(ep());
    ASSERT_TRUE(c.write(
        post("/v1/completions", R"({"prompt":"Hello","max_tokens":4,"stream":true})", true)));
    std::string got;
    ASSERT_TRUE(c.read_until(got, "data: [DONE]\n\n\r\n0\r\n\r\n")) << got;
    EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got;
    got.clear();
    ASSERT_TRUE(c.write("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    ASSERT_TRUE(c.read_until(got, "\"status\":\"ok\"")) << got;
    got.clear();
    ASSERT_TRUE(c.write(post("/v1/completions", R"({"prompt":"Hello","max_tokens":3})", false)));
    got = c.read_all();  // Connection: close: the server ends the connection after it
    EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got;
    EXPECT_NE(got.find("\"text_completion\""), std::string::npos) << got;
  }
  {
    ClientConn c(ep());
    ASSERT_TRUE(c.write(
        post("/v1/completions",
             R"({"prompt":"Count:","max_tokens":1500,"ignore_eos":true,"stream":true})", true)));
    std::string got;
    ASSERT_TRUE(c.read_until(got, "data: ")) << got;
    EXPECT_TRUE(wait_metric("rz_active_slots", 1, 5s)) << metrics();
    c.close();  // no close_notify, the socket just goes
  }
  EXPECT_TRUE(wait_metric("rz_active_slots", 0, 5s)) << metrics();
  EXPECT_EQ(metric(metrics(), "rz_requests_ended_total{outcome=\"cancelled\"}"), 1);
}

TEST_F(TlsServerTest, WssGenerateStreamsToDoneAndShutdownClosesCleanly) {
  start_tls();
  const std::vector<int64_t> ref = direct_greedy(kPrompt, 12);
  WssClient c(ep());
  c.send(R"({"type":"ping"})");
  EXPECT_EQ(c.read_frame().type, "pong");
  c.send(generate_json("a", kPrompt, 12));
  const std::vector<Frame> frames = c.until_end("a");
  EXPECT_EQ(frames.back().type, "done") << frames.back().raw;
  EXPECT_EQ(check_stream(frames), ref);
  EXPECT_TRUE(wait_metric("rz_ws_connections_open", 1, 5s));

  // A request running at shutdown may finish within the drain; then a close frame (1001).
  c.send(generate_json("d", kPrompt, 40, 0.0f, true));
  EXPECT_EQ(c.read_frame().type, "token");
  auto stopping = std::async(std::launch::async, [&] { server_->shutdown(40s); });
  EXPECT_EQ(c.until_end("d").back().type, "done");
  EXPECT_FALSE(c.read(10s).has_value());
  EXPECT_EQ(c.error(), beast::websocket::error::closed) << c.error().message();
  EXPECT_EQ(c.close_reason().code, beast::websocket::close_code::going_away);
  ASSERT_EQ(stopping.wait_for(50s), std::future_status::ready);
}

TEST_F(TlsServerTest, ApiKeysAreStillRequiredOverTls) {
  ServerConfig sc;
  sc.api_keys = {"key-one"};
  start_tls(sc);
  const std::string body = R"({"prompt":"Hi","max_tokens":2})";
  HttpResult r = http_send(ep(), "/v1/completions", body);
  EXPECT_EQ(r.status, 401) << r.body;
  EXPECT_NE(r.headers.find("WWW-Authenticate: Bearer"), std::string::npos) << r.headers;
  EXPECT_EQ(
      http_send(ep(), "/v1/completions", body, "POST", "Authorization: Bearer nope\r\n").status,
      401);
  EXPECT_EQ(
      http_send(ep(), "/v1/completions", body, "POST", "Authorization: Bearer key-one\r\n").status,
      200);
  EXPECT_EQ(http_request(ep(), "/metrics").status, 401);
  EXPECT_EQ(http_request(ep(), "/health").status, 200);
  EXPECT_EQ(WssClient::try_upgrade_auth(ep(), "", "").first, 401);
  EXPECT_EQ(WssClient::try_upgrade_auth(ep(), "Bearer nope", "").first, 401);
  EXPECT_EQ(WssClient::try_upgrade_auth(ep(), "Bearer key-one", "").first, 101);
  EXPECT_EQ(WssClient::try_upgrade_auth(ep(), "", "rz, rz-key.key-one"),
            std::make_pair(101, std::string("rz")));
}

// Plain HTTP or a plain WebSocket upgrade to the TLS port gets a plain 400 that names the scheme
// to use, garbage where the ClientHello belongs is dropped, and TLS clients are served after.
TEST_F(TlsServerTest, PlainHttpAndGarbageAreRefusedAndTlsClientsServedAfter) {
  start_tls();
  const HttpResult r = http_request(port_, "/health");  // a plain Endpoint: no TLS
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("this port speaks TLS: use https://"), std::string::npos) << r.body;
  // The rest of a request is read and dropped, so the answer is not lost to a reset.
  EXPECT_EQ(http_send(port_, "/v1/completions", std::string(20000, 'x')).status, 400);
  EXPECT_EQ(WsClient::try_upgrade(port_), 400);
  EXPECT_THROW(WsClient c(port_), std::exception);

  // A TLS record header and a ClientHello of nonsense: the handshake fails at once.
  {
    ClientConn c(port_);
    std::string hello("\x16\x03\x01\x00\x40\x01\x00\x00\x3c", 9);
    hello += std::string(64, '\x07');
    ASSERT_TRUE(c.write(hello));
    const auto t0 = std::chrono::steady_clock::now();
    c.read_all();  // an alert, then the server closes
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  }
  EXPECT_EQ(http_request(ep(), "/health").status, 200);
  EXPECT_TRUE(wait_metric("rz_tls_handshake_failures_total", 5, 5s)) << metrics();
}

// Clients that connect and say nothing, or stop in the middle of their ClientHello, hold their
// sockets until the first-frame timeout and no longer; meanwhile TLS clients are served.
TEST_F(TlsServerTest, StalledHandshakesAreDroppedAtTheFirstFrameTimeoutOthersServed) {
  ServerConfig sc;
  sc.first_frame_timeout = 700ms;
  start_tls(sc);
  ClientConn silent(port_);
  ClientConn partial(port_);  // past the detection (a ClientHello record), then nothing
  ASSERT_TRUE(partial.write(std::string("\x16\x03\x01\x00\x40\x01\x00\x00\x3c\x03\x03", 11)));
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(http_request(ep(), "/health").status, 200);
  WssClient ws(ep());
  ws.send(R"({"type":"ping"})");
  EXPECT_EQ(ws.read_frame().type, "pong");
  char byte;
  EXPECT_EQ(silent.read(&byte, 1), 0);  // closed by the server, not the 10 s receive timeout
  EXPECT_LE(partial.read(&byte, 1), 0);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_TRUE(wait_metric("rz_tls_handshake_failures_total", 2, 5s)) << metrics();
  EXPECT_GE(metric(metrics(), "rz_first_frame_timeouts_total"), 2);
  ws.send(R"({"type":"ping"})");
  EXPECT_EQ(ws.read_frame().type, "pong");
}

// TLS 1.2 is the least the server speaks: a TLS 1.1 client gets a protocol_version alert, a TLS
// 1.2 one is served.
TEST_F(TlsServerTest, Tls11IsRefusedTls12Served) {
  start_tls();
  const auto old = tls_client_context(test_certificate().cert_pem, TLS1_1_VERSION);
  try {
    ClientConn c(Endpoint(port_, old.get()));
    ADD_FAILURE() << "a TLS 1.1 handshake succeeded";
  } catch (const std::runtime_error& e) {
    const std::string why = e.what();
    if (why.find("no protocols available") != std::string::npos) {  // this OpenSSL has no 1.1
      std::fprintf(stderr, "note: the client could not offer TLS 1.1: %s\n", why.c_str());
    } else {
      EXPECT_NE(why.find("alert protocol version"), std::string::npos) << why;  // the server's
    }
  }
  const auto v12 = tls_client_context(test_certificate().cert_pem, TLS1_2_VERSION);
  EXPECT_EQ(http_request(Endpoint(port_, v12.get()), "/health").status, 200);
}

TEST_F(TlsServerTest, StartRefusesAKeyOfAnotherCertificate) {
  ServerConfig sc;
  sc.tls_cert_file = test_certificate().cert_file;
  sc.tls_key_file = test_certificate().other_key_file;
  try {
    start(sc);
    ADD_FAILURE() << "the server started with a key that does not match its certificate";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not match the certificate"), std::string::npos)
        << e.what();
  }
}

// ---- loading the context (no server) -----------------------------------------------------------

std::string load_error(const std::string& cert, const std::string& key) {
  try {
    load_tls_context(cert, key);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TlsContextTest, ErrorsNameTheFileAndTheCause) {
  const TestCertificate& c = test_certificate();
  EXPECT_NE(load_tls_context(c.cert_file, c.key_file), nullptr);
  EXPECT_NE(describe_tls_certificate(*load_tls_context(c.cert_file, c.key_file)).find("CN=rz test"),
            std::string::npos);

  std::string e = load_error(c.dir + "/missing.pem", c.key_file);
  EXPECT_NE(e.find(c.dir + "/missing.pem: cannot read the TLS certificate (--tls-cert): No such "
                           "file or directory"),
            std::string::npos)
      << e;
  e = load_error(c.cert_file, c.dir + "/missing.pem");
  EXPECT_NE(e.find("cannot read the TLS private key (--tls-key)"), std::string::npos) << e;
  e = load_error(c.dir, c.key_file);  // a directory
  EXPECT_NE(e.find("cannot read the TLS certificate"), std::string::npos) << e;
  e = load_error(c.key_file, c.key_file);  // a key where the certificate belongs
  EXPECT_NE(e.find(c.key_file + ": holds no PEM certificate"), std::string::npos) << e;
  e = load_error(c.cert_file, c.cert_file);  // and the other way round
  EXPECT_NE(e.find(c.cert_file + ": holds no PEM private key"), std::string::npos) << e;
  e = load_error(c.cert_file, c.other_key_file);
  EXPECT_NE(e.find(c.other_key_file + ": the private key does not match the certificate in " +
                   c.cert_file),
            std::string::npos)
      << e;
  e = load_error(c.cert_file, "");
  EXPECT_NE(e.find("TLS needs both a certificate and its private key"), std::string::npos) << e;

  // An encrypted key: refused with a hint, and nothing prompts for its pass phrase.
  const std::string encrypted = c.dir + "/encrypted_key.pem";
  {
    BIO* in = BIO_new_file(c.key_file.c_str(), "r");
    EVP_PKEY* key = PEM_read_bio_PrivateKey(in, nullptr, nullptr, nullptr);
    BIO* out = BIO_new_file(encrypted.c_str(), "w");
    static char pass[] = "secret";
    ASSERT_EQ(PEM_write_bio_PKCS8PrivateKey(out, key, EVP_aes_256_cbc(), pass, 6, nullptr, nullptr),
              1);
    BIO_free(out);
    EVP_PKEY_free(key);
    BIO_free(in);
  }
  e = load_error(c.cert_file, encrypted);
  EXPECT_NE(e.find(encrypted + ": the private key is encrypted"), std::string::npos) << e;
}

}  // namespace
}  // namespace rz::net
