// rz-wsbench: a load generator for the rz server's WebSocket protocol (docs/protocol.md) or, with
// --api openai, its OpenAI-compatible HTTP API streamed as server-sent events (docs/openai.md).
// Opens --connections connections, sends generate requests (closed loop, or Poisson arrivals with
// --rate), records when each token frame (or content chunk) arrives, and prints TTFT / ITL / TPOT
// / end-to-end latency, throughput and errors by code (bench/wsbench_report.hpp), the same
// report whichever protocol was spoken.
//
// All Beast code is in this one file (Beast templates are slow to compile). Everything runs on
// one thread and one io_context, so no state needs a lock or a strand; the client's own work per
// frame is a small simdjson parse, far below the server's time per token.
//
//   Bench ── owns the run: setup (connect all), issuing (closed or open loop), the deadline,
//     │      the results
//     └─ Client × N ── one connection, either of
//          Conn ──── one WebSocket: write queue, read loop, requests running on it by id
//          HttpConn ─ one keep-alive HTTP connection: one streamed request at a time, its SSE
//                     body read by bench/wsbench_sse.hpp
#include <simdjson.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench/wsbench_frames.hpp"
#include "bench/wsbench_options.hpp"
#include "bench/wsbench_report.hpp"
#include "bench/wsbench_sse.hpp"
#include "bench/wsbench_stats.hpp"
#include "bench/wsbench_workload.hpp"
#include "proto/serialize.hpp"

namespace rz::wsbench {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;
using Ws = websocket::stream<beast::tcp_stream>;
using Stream = beast::tcp_stream;

constexpr int kMaxReconnects = 5;           // consecutive failed attempts before giving up
constexpr double kReconnectBackoffS = 0.2;  // doubled after each failed attempt
constexpr double kCloseTimeoutS = 5.0;      // bound on the closing handshake at the end

std::string error_text(const beast::error_code& ec) { return ec.message(); }

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

class Bench;

// A request running on a connection: when it was sent and when its token frames came.
struct Running {
  double t_send = 0.0;
  std::vector<FrameArrival> frames;
  uint64_t tokens = 0;  // tokens received so far (= the next frame's expected index)
};

// A request that ended well, whichever protocol carried it.
struct Completed {
  RequestMetrics metrics;
  uint64_t prompt_tokens = 0;
  std::string finish_reason;
  bool usage_mismatch = false;           // the usage does not match the tokens received
  std::optional<double> server_ttft_ms;  // the WebSocket's timings.ttft_ms
};

// One connection to the server, as Bench sees it.
class Client {
 public:
  explicit Client(std::size_t slot) : slot_(slot) {}
  virtual ~Client() = default;
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  virtual void connect() = 0;
  virtual void send(const proto::GenerateRequest& r, double t_send) = 0;
  virtual void close() = 0;                 // politely, at the end of a run
  virtual void kill(const char* code) = 0;  // fail every running request with `code`, drop it

  virtual bool open() const = 0;
  virtual bool dead() const = 0;  // gave up reconnecting
  virtual std::size_t running() const = 0;
  std::size_t slot() const { return slot_; }

 private:
  std::size_t slot_;
};

// One WebSocket connection. Handlers hold the Ws they were started on (a shared_ptr), so a stream
// lives until its last operation completes even after the connection was replaced by a new one;
// a handler whose stream is no longer the current one does nothing.
class Conn : public Client, public std::enable_shared_from_this<Conn> {
 public:
  Conn(Bench& bench, net::io_context& ioc, std::size_t slot)
      : Client(slot), bench_(bench), ioc_(ioc) {}

  void connect() override;
  void send(const proto::GenerateRequest& r, double t_send) override;
  void close() override;                 // closing handshake, at the end of a run
  void kill(const char* code) override;  // fail every running request with `code`, drop the socket

  bool open() const override { return open_; }
  bool dead() const override { return dead_; }
  std::size_t running() const override { return running_.size(); }

 private:
  void on_connect(const std::shared_ptr<Ws>& ws, beast::error_code ec);
  void on_handshake(const std::shared_ptr<Ws>& ws,
                    const std::shared_ptr<websocket::response_type>& res, beast::error_code ec);
  void read(const std::shared_ptr<Ws>& ws);
  void on_read(const std::shared_ptr<Ws>& ws, beast::error_code ec);
  void write(const std::shared_ptr<Ws>& ws);
  void on_frame(std::string_view text, double t);
  void lost(const std::shared_ptr<Ws>& ws, const std::string& why);
  void connect_failed(const std::string& why);

  Bench& bench_;
  net::io_context& ioc_;
  std::shared_ptr<Ws> ws_;  // the current stream; null while not connected
  beast::flat_buffer buffer_;
  std::deque<std::string> out_;  // frames waiting to be written; front() is being written
  bool writing_ = false;
  bool open_ = false;
  bool closing_ = false;
  bool dead_ = false;  // gave up reconnecting
  int failed_attempts_ = 0;
  std::unordered_map<std::string, Running> running_;
  simdjson::dom::parser parser_;
  std::unique_ptr<net::steady_timer> retry_timer_;
};

// One keep-alive HTTP connection of --api openai: one streamed request at a time (HTTP/1.1 has no
// multiplexing), its body fed to an OpenAiStream as it arrives. Handlers hold the Stream they were
// started on, as in Conn. A request whose reused connection turns out closed by the server (a
// keep-alive connection it timed out) before any byte of the answer came is sent once more on a
// fresh connection, as HTTP clients do; its time then includes the new connection's.
class HttpConn : public Client, public std::enable_shared_from_this<HttpConn> {
 public:
  HttpConn(Bench& bench, net::io_context& ioc, std::size_t slot)
      : Client(slot), bench_(bench), ioc_(ioc) {}

  void connect() override;
  // Sends at once on an open connection; otherwise connects first (the request's time includes
  // the connecting).
  void send(const proto::GenerateRequest& r, double t_send) override;
  void close() override;
  void kill(const char* code) override;

  bool open() const override { return open_; }
  bool dead() const override { return dead_; }
  std::size_t running() const override { return cur_ ? 1 : 0; }

 private:
  struct Request {
    double t_send = 0.0;
    bool fresh = false;    // the connection was opened for this request
    bool retried = false;  // sent again after a stale keep-alive connection
  };

  void on_connect(const std::shared_ptr<Stream>& s, beast::error_code ec);
  void connect_failed(const std::string& why);
  void write_request(const std::shared_ptr<Stream>& s);
  void read(const std::shared_ptr<Stream>& s);
  void on_read(const std::shared_ptr<Stream>& s, beast::error_code ec);
  void on_response_end(double t);
  void failed(const std::shared_ptr<Stream>& s, const std::string& why);
  void drop_socket();

  Bench& bench_;
  net::io_context& ioc_;
  std::shared_ptr<Stream> s_;  // the current stream; null while not connected
  beast::flat_buffer buffer_;
  http::request<http::string_body> req_;  // the current request, kept for a second try
  std::optional<http::response_parser<http::string_body>> parser_;
  std::optional<OpenAiStream> stream_;  // the current response, when it is an event stream
  bool header_read_ = false;
  std::optional<Request> cur_;
  bool open_ = false;
  bool connecting_ = false;
  bool closing_ = false;
  bool dead_ = false;
  int failed_attempts_ = 0;
  simdjson::dom::parser parser_json_;
  std::unique_ptr<net::steady_timer> retry_timer_;
};

class Bench {
 public:
  explicit Bench(Options o)
      : o_(std::move(o)),
        origin_(Clock::now()),
        deadline_(ioc_),
        arrival_timer_(ioc_),
        signals_(ioc_, SIGINT, SIGTERM),
        arrivals_(o_.rate.value_or(1.0), o_.seed) {}

  int run();

  // ---- called by Conn ----
  double now() const { return std::chrono::duration<double>(Clock::now() - origin_).count(); }
  const Options& options() const { return o_; }
  const tcp::resolver::results_type& endpoints() const { return endpoints_; }
  bool stopping() const { return stopping_; }
  Results& results() { return results_; }
  void connected(Client& c);
  void connect_failed(Client& c, const std::string& why);
  void connection_lost(Client& c, const std::string& why);
  void request_completed(Client& c, const Completed& done);
  // `message`, when given, is printed once per code (the server's words for what went wrong).
  void request_failed(Client& c, const std::string& code, const std::string& message = {});
  // The Host header ("host:port", IPv6 in brackets); --api openai: the request target
  // (BASE/completions, or BASE/chat/completions with --chat).
  const std::string& target() const { return target_; }
  const std::string& host_header() const { return host_header_; }
  void close_started() { ++closing_left_; }
  void close_done() {
    if (--closing_left_ == 0) deadline_.cancel();  // nothing else keeps ioc_.run() going
  }

 private:
  void start();
  bool may_issue() const;
  void issue(Client& c);
  void fill(Client& c);
  void next_arrival();
  void on_arrival();
  Client* open_loop_target();
  std::shared_ptr<Client> make_client(std::size_t slot);
  void request_ended(Client& c);
  void maybe_finish();
  void finish();
  void abort_run(const char* code);

  Options o_;
  net::io_context ioc_;
  Clock::time_point origin_;
  tcp::resolver::results_type endpoints_;
  std::string target_, host_header_;
  std::vector<std::shared_ptr<Client>> conns_;
  net::steady_timer deadline_;
  net::steady_timer arrival_timer_;
  net::signal_set signals_;
  PoissonArrivals arrivals_;
  Results results_;

  bool started_ = false;        // setup over, requests being issued
  bool stopping_ = false;       // finish() or abort_run() ran
  bool arrivals_done_ = false;  // open loop: no more arrivals
  bool interrupted_ = false;    // SIGINT / SIGTERM
  std::size_t setup_left_ = 0;  // connections whose first attempt has not settled
  std::string first_connect_error_;
  double t_start_ = 0.0, t_end_ = 0.0;
  uint64_t in_flight_ = 0;
  std::size_t closing_left_ = 0;    // closing handshakes under way at the end
  std::size_t rr_ = 0;              // open loop: next connection, round-robin
  std::size_t grown_ = 0;           // openai open loop: connections opened for busy arrivals
  std::set<std::string> reported_;  // error codes whose message was printed
};

// ---- Conn ---------------------------------------------------------------------------------------

void Conn::connect() {
  open_ = false;
  auto ws = std::make_shared<Ws>(ioc_);
  ws_ = ws;
  buffer_.clear();
  beast::get_lowest_layer(*ws).expires_after(seconds(bench_.options().connect_timeout_s));
  beast::get_lowest_layer(*ws).async_connect(
      bench_.endpoints(),
      [self = shared_from_this(), ws](beast::error_code ec, const tcp::endpoint&) {
        self->on_connect(ws, ec);
      });
}

void Conn::on_connect(const std::shared_ptr<Ws>& ws, beast::error_code ec) {
  if (ws != ws_) return;
  if (ec) return connect_failed("cannot connect: " + error_text(ec));
  beast::get_lowest_layer(*ws).socket().set_option(tcp::no_delay(true), ec);
  beast::get_lowest_layer(*ws).expires_never();  // the WebSocket stream's own timeouts apply now
  websocket::stream_base::timeout t;
  t.handshake_timeout = seconds(bench_.options().connect_timeout_s);
  t.idle_timeout = websocket::stream_base::none();
  t.keep_alive_pings = false;
  ws->set_option(t);
  const Options& o = bench_.options();
  ws->set_option(websocket::stream_base::decorator([key = o.api_key](websocket::request_type& req) {
    req.set(http::field::user_agent, "rz-wsbench");
    if (key) req.set(http::field::authorization, "Bearer " + *key);
  }));
  auto res = std::make_shared<websocket::response_type>();
  ws->async_handshake(*res, bench_.host_header(), o.url.path,
                      [self = shared_from_this(), ws, res](beast::error_code ec) {
                        self->on_handshake(ws, res, ec);
                      });
}

void Conn::on_handshake(const std::shared_ptr<Ws>& ws,
                        const std::shared_ptr<websocket::response_type>& res,
                        beast::error_code ec) {
  if (ws != ws_) return;
  if (ec) {
    std::string why = "WebSocket handshake failed: " + error_text(ec);
    if (ec == websocket::error::upgrade_declined)
      why = "WebSocket handshake refused: HTTP " + std::to_string(res->result_int()) + " " +
            std::string(res->reason());
    beast::error_code ignored;
    beast::get_lowest_layer(*ws).socket().close(ignored);
    return connect_failed(why);
  }
  ws->text(true);
  open_ = true;
  failed_attempts_ = 0;
  read(ws);
  // A first frame at once: rz serve closes a connection that sends none within its first-frame
  // timeout, and with --rate a connection may wait long for its first request. (The pong is
  // ignored.)
  if (writing_) {
    out_.push_back(R"({"type":"ping"})");  // front() is being written
  } else {
    out_.push_front(R"({"type":"ping"})");
    write(ws);
  }
  bench_.connected(*this);
}

void Conn::connect_failed(const std::string& why) {
  ws_.reset();
  open_ = false;
  // Given up before Bench hears of it, so that it sees the last live connection go.
  if (++failed_attempts_ > kMaxReconnects) dead_ = true;
  bench_.connect_failed(*this, why);
  if (bench_.stopping() || dead_) return;
  // Reconnect after a back-off (only during a run: Bench marks setup failures dead).
  retry_timer_ = std::make_unique<net::steady_timer>(ioc_);
  retry_timer_->expires_after(seconds(kReconnectBackoffS * (1 << (failed_attempts_ - 1))));
  retry_timer_->async_wait([self = shared_from_this()](beast::error_code ec) {
    if (!ec && !self->bench_.stopping() && !self->dead_) self->connect();
  });
}

void Conn::send(const proto::GenerateRequest& r, double t_send) {
  running_[r.id] = Running{t_send, {}, 0};
  out_.push_back(proto::to_json(r));
  if (!writing_) write(ws_);
}

void Conn::write(const std::shared_ptr<Ws>& ws) {
  if (out_.empty() || !ws || ws != ws_) {
    writing_ = false;
    return;
  }
  writing_ = true;
  ws->async_write(net::buffer(out_.front()),
                  [self = shared_from_this(), ws](beast::error_code ec, std::size_t) {
                    if (ws != self->ws_) return;
                    self->writing_ = false;
                    if (ec) return self->lost(ws, "write failed: " + error_text(ec));
                    self->out_.pop_front();
                    self->write(ws);
                  });
}

void Conn::read(const std::shared_ptr<Ws>& ws) {
  ws->async_read(buffer_, [self = shared_from_this(), ws](beast::error_code ec, std::size_t) {
    self->on_read(ws, ec);
  });
}

void Conn::on_read(const std::shared_ptr<Ws>& ws, beast::error_code ec) {
  if (ws != ws_) return;
  if (ec) {
    if (closing_) return;
    return lost(ws, ec == websocket::error::closed ? "the server closed the connection"
                                                   : "read failed: " + error_text(ec));
  }
  const double t = bench_.now();
  if (ws->got_text()) {
    auto data = buffer_.cdata();
    on_frame(std::string_view(static_cast<const char*>(data.data()), data.size()), t);
  } else {
    ++bench_.results().protocol_violations;  // the protocol has text frames only
  }
  buffer_.consume(buffer_.size());
  if (ws == ws_) read(ws);
}

void Conn::on_frame(std::string_view text, double t) {
  Results& res = bench_.results();
  ServerFrameInfo f;
  std::string why;
  if (!parse_server_frame(parser_, text, f, why)) {
    ++res.protocol_violations;
    return;
  }
  using Kind = ServerFrameInfo::Kind;
  if (f.kind == Kind::pong) return;
  auto it = f.id ? running_.find(*f.id) : running_.end();
  if (f.kind == Kind::error && it == running_.end()) {
    ++res.untied_errors[f.code];  // not about a request of ours we can name
    return;
  }
  if (it == running_.end()) {
    ++res.protocol_violations;  // a token or done frame for no running request
    return;
  }
  if (f.kind == Kind::token) {
    Running& r = it->second;
    if (f.index != r.tokens || f.n_tokens == 0) ++res.protocol_violations;
    r.frames.push_back(FrameArrival{t, static_cast<std::size_t>(f.n_tokens)});
    r.tokens += f.n_tokens;
    return;
  }
  Running r = std::move(it->second);
  running_.erase(it);
  if (f.kind == Kind::done) {
    Completed c{request_metrics(r.t_send, r.frames, t), f.prompt_tokens, f.finish_reason,
                f.completion_tokens != r.tokens, f.server_ttft_ms};
    bench_.request_completed(*this, c);
  } else {
    bench_.request_failed(*this, f.code, f.message);
  }
}

void Conn::lost(const std::shared_ptr<Ws>& ws, const std::string& why) {
  if (ws != ws_) return;
  beast::error_code ignored;
  beast::get_lowest_layer(*ws).socket().close(ignored);
  ws_.reset();
  open_ = false;
  out_.clear();
  writing_ = false;
  bench_.connection_lost(*this, why);
  auto running = std::move(running_);
  running_.clear();
  for (std::size_t i = 0; i < running.size(); ++i) bench_.request_failed(*this, kErrConnectionLost);
  if (!bench_.stopping() && !dead_) connect();
}

void Conn::close() {
  closing_ = true;
  if (retry_timer_) retry_timer_->cancel();
  if (!ws_ || !open_) return;
  auto ws = ws_;
  bench_.close_started();
  ws->async_close(
      websocket::close_code::normal,
      [self = shared_from_this(), ws](beast::error_code) { self->bench_.close_done(); });
}

void Conn::kill(const char* code) {
  closing_ = true;
  dead_ = true;
  if (retry_timer_) retry_timer_->cancel();
  auto running = std::move(running_);
  running_.clear();
  for (std::size_t i = 0; i < running.size(); ++i) bench_.request_failed(*this, code);
  if (ws_) {
    beast::error_code ignored;
    beast::get_lowest_layer(*ws_).socket().close(ignored);
  }
  ws_.reset();
  open_ = false;
}

// ---- HttpConn -----------------------------------------------------------------------------------

void HttpConn::connect() {
  open_ = false;
  connecting_ = true;
  auto s = std::make_shared<Stream>(ioc_);
  s_ = s;
  buffer_.clear();
  s->expires_after(seconds(bench_.options().connect_timeout_s));
  s->async_connect(bench_.endpoints(),
                   [self = shared_from_this(), s](beast::error_code ec, const tcp::endpoint&) {
                     self->on_connect(s, ec);
                   });
}

void HttpConn::on_connect(const std::shared_ptr<Stream>& s, beast::error_code ec) {
  if (s != s_) return;
  connecting_ = false;
  if (ec) return connect_failed("cannot connect: " + error_text(ec));
  s->socket().set_option(tcp::no_delay(true), ec);
  s->expires_never();  // a generation takes as long as it takes; --timeout bounds the run
  open_ = true;
  failed_attempts_ = 0;
  if (cur_) write_request(s);  // a request waited for this connection
  bench_.connected(*this);
}

void HttpConn::connect_failed(const std::string& why) {
  s_.reset();
  open_ = false;
  connecting_ = false;
  if (++failed_attempts_ > kMaxReconnects) dead_ = true;
  bench_.connect_failed(*this, why);
  if (cur_) {  // the request that waited for this connection was not sent (or not again)
    const char* code = cur_->retried ? kErrConnectionLost : kErrNotSent;
    cur_.reset();
    bench_.request_failed(*this, code);
  }
  if (bench_.stopping() || dead_ || closing_) return;
  retry_timer_ = std::make_unique<net::steady_timer>(ioc_);
  retry_timer_->expires_after(seconds(kReconnectBackoffS * (1 << (failed_attempts_ - 1))));
  retry_timer_->async_wait([self = shared_from_this()](beast::error_code ec) {
    if (!ec && !self->bench_.stopping() && !self->dead_ && !self->open_ && !self->connecting_)
      self->connect();
  });
}

void HttpConn::send(const proto::GenerateRequest& r, double t_send) {
  const Options& o = bench_.options();
  cur_ = Request{t_send, !open_, false};
  req_ = {};
  req_.method(http::verb::post);
  req_.target(bench_.target());
  req_.version(11);
  req_.set(http::field::host, bench_.host_header());
  req_.set(http::field::user_agent, "rz-wsbench");
  req_.set(http::field::content_type, "application/json");
  req_.set(http::field::accept, "text/event-stream");
  if (o.api_key) req_.set(http::field::authorization, "Bearer " + *o.api_key);
  req_.keep_alive(true);
  req_.body() = openai_request_json(r, o.model);
  req_.prepare_payload();
  if (open_) return write_request(s_);
  if (retry_timer_) retry_timer_->cancel();
  if (!connecting_) connect();
}

void HttpConn::write_request(const std::shared_ptr<Stream>& s) {
  parser_.emplace();
  parser_->body_limit(std::numeric_limits<std::uint64_t>::max());  // a stream's body is read
  stream_.reset();                                                 // as it comes and dropped
  header_read_ = false;
  http::async_write(*s, req_, [self = shared_from_this(), s](beast::error_code ec, std::size_t) {
    if (s != self->s_) return;
    if (ec) return self->failed(s, "write failed: " + error_text(ec));
    self->read(s);
  });
}

void HttpConn::read(const std::shared_ptr<Stream>& s) {
  http::async_read_some(
      *s, buffer_, *parser_,
      [self = shared_from_this(), s](beast::error_code ec, std::size_t) { self->on_read(s, ec); });
}

void HttpConn::on_read(const std::shared_ptr<Stream>& s, beast::error_code ec) {
  if (s != s_ || !cur_) return;
  if (ec) {
    if (closing_) return;
    return failed(s, ec == http::error::end_of_stream ? "the server closed the connection"
                                                      : "read failed: " + error_text(ec));
  }
  const double t = bench_.now();
  auto& res = parser_->get();
  if (!header_read_ && parser_->is_header_done()) {
    header_read_ = true;
    const auto type = res[http::field::content_type];
    if (res.result_int() == 200 && type.substr(0, 17) == "text/event-stream") stream_.emplace();
  }
  if (stream_ && !res.body().empty()) {
    stream_->feed(res.body(), t);
    res.body().clear();  // the string body's reader appends after what is left: nothing
  }
  if (parser_->is_done()) return on_response_end(t);
  read(s);
}

// The whole answer is in: a streamed one's outcome, or an error answered as one JSON object.
void HttpConn::on_response_end(double t) {
  Results& results = bench_.results();
  const Request req = *cur_;
  cur_.reset();
  const bool keep_alive = parser_->get().keep_alive();
  const unsigned status = parser_->get().result_int();
  const std::string body = std::move(parser_->get().body());
  std::optional<OpenAiStream> stream = std::move(stream_);
  parser_.reset();
  stream_.reset();
  if (!keep_alive) drop_socket();

  if (stream) {
    OpenAiStream::Outcome o = stream->finish(t);
    results.protocol_violations += o.violations;
    if (o.completed) {
      bench_.request_completed(
          *this, Completed{request_metrics(req.t_send, o.frames, o.t_end), o.prompt_tokens,
                           o.finish_reason, o.usage_mismatch, std::nullopt});
    } else {
      bench_.request_failed(*this, o.error_code, o.error_message);
    }
  } else {
    // {"error": {"message", "type", "param", "code"}}; the code names the error as the
    // WebSocket's error frames do (overloaded, invalid_api_key, ...).
    std::string code = "http_" + std::to_string(status), message;
    simdjson::dom::element doc;
    if (!parser_json_.parse(body).get(doc)) {
      std::string_view v;
      if (!doc.at_pointer("/error/code").get_string().get(v) && !v.empty())
        code = v;
      else if (!doc.at_pointer("/error/type").get_string().get(v) && !v.empty())
        code = v;
      if (!doc.at_pointer("/error/message").get_string().get(v)) message = v;
    }
    if (status == 200) {  // a whole response where a stream was asked for
      ++results.protocol_violations;
      code = OpenAiStream::kErrBadStream;
      message = "the answer was not an event stream";
    } else {
      message = "HTTP " + std::to_string(status) + (message.empty() ? "" : ": " + message);
    }
    bench_.request_failed(*this, code, message);
  }
  if (!open_ && !connecting_ && !dead_ && !closing_ && !bench_.stopping()) connect();
}

void HttpConn::failed(const std::shared_ptr<Stream>& s, const std::string& why) {
  if (s != s_) return;
  const bool answered = buffer_.size() > 0 || (parser_ && parser_->got_some());
  drop_socket();
  parser_.reset();
  stream_.reset();
  if (cur_ && !cur_->fresh && !cur_->retried && !answered && !bench_.stopping()) {
    // A keep-alive connection the server had closed: once more on a fresh one.
    cur_->retried = true;
    cur_->fresh = true;
    return connect();
  }
  bench_.connection_lost(*this, why);
  if (cur_) {
    cur_.reset();
    bench_.request_failed(*this, kErrConnectionLost);
  }
  if (!bench_.stopping() && !dead_ && !closing_ && !open_ && !connecting_) connect();
}

void HttpConn::drop_socket() {
  if (s_) {
    beast::error_code ignored;
    s_->socket().shutdown(tcp::socket::shutdown_both, ignored);
    s_->socket().close(ignored);
  }
  s_.reset();
  open_ = false;
  connecting_ = false;
  buffer_.clear();
}

void HttpConn::close() {
  closing_ = true;
  if (retry_timer_) retry_timer_->cancel();
  drop_socket();  // nothing to say first: HTTP has no closing handshake
}

void HttpConn::kill(const char* code) {
  closing_ = true;
  dead_ = true;
  if (retry_timer_) retry_timer_->cancel();
  drop_socket();  // a pending read ends with operation_aborted; it still holds parser_, kept
  stream_.reset();
  if (cur_) {
    cur_.reset();
    bench_.request_failed(*this, code);
  }
}

// ---- Bench --------------------------------------------------------------------------------------

int Bench::run() {
  {
    tcp::resolver resolver(ioc_);
    beast::error_code ec;
    endpoints_ = resolver.resolve(o_.url.host, o_.url.port, ec);
    if (ec) {
      std::fprintf(stderr, "rz-wsbench: %s: cannot resolve host '%s': %s\n", o_.url.text.c_str(),
                   o_.url.host.c_str(), ec.message().c_str());
      return 1;
    }
  }
  signals_.async_wait([this](beast::error_code ec, int) {
    if (!ec) {
      interrupted_ = true;
      abort_run("interrupted");
    }
  });
  host_header_ =
      (o_.url.host.find(':') != std::string::npos ? "[" + o_.url.host + "]" : o_.url.host) + ":" +
      o_.url.port;
  target_ = o_.url.path + (o_.chat ? "/chat/completions" : "/completions");
  setup_left_ = static_cast<std::size_t>(o_.connections);
  for (std::size_t i = 0; i < setup_left_; ++i) conns_.push_back(make_client(i));
  for (auto& c : conns_) c->connect();
  ioc_.run();
  if (grown_)
    std::fprintf(stderr,
                 "rz-wsbench: opened %zu more connection(s) for arrivals that found every "
                 "connection busy (--connections %lld)\n",
                 grown_, static_cast<long long>(o_.connections));
  if (!started_) {
    std::fprintf(stderr, "rz-wsbench: %s: %s\n", o_.url.text.c_str(), first_connect_error_.c_str());
    return 1;
  }
  results_.duration_s = t_end_ - t_start_;
  const std::string report = o_.json ? format_json(o_, results_) : format_table(o_, results_);
  std::fwrite(report.data(), 1, report.size(), stdout);
  std::fflush(stdout);
  if (interrupted_) return 130;  // as a shell reports SIGINT
  if (results_.completed == 0) {
    std::fprintf(stderr, "rz-wsbench: no request completed\n");
    return 1;
  }
  return 0;
}

std::shared_ptr<Client> Bench::make_client(std::size_t slot) {
  if (o_.api == Api::openai) return std::make_shared<HttpConn>(*this, ioc_, slot);
  return std::make_shared<Conn>(*this, ioc_, slot);
}

void Bench::connected(Client& c) {
  if (!started_) {
    if (--setup_left_ == 0) start();
    return;
  }
  if (!o_.rate) fill(c);
}

void Bench::connect_failed(Client& c, const std::string& why) {
  ++results_.connect_failures;
  if (!started_) {
    // A connection that fails during setup is not retried: the run goes on with the others
    // (or stops if there are none).
    if (first_connect_error_.empty()) first_connect_error_ = why;
    if (conns_.size() > 1)  // with one connection, run() prints the error once
      std::fprintf(stderr, "rz-wsbench: connection %zu: %s\n", c.slot(), why.c_str());
    c.kill(kErrNotSent);
    if (--setup_left_ == 0) start();
    return;
  }
  std::fprintf(stderr, "rz-wsbench: connection %zu: %s\n", c.slot(), why.c_str());
  maybe_finish();  // the last live connection may just have given up
}

void Bench::connection_lost(Client& c, const std::string& why) {
  std::fprintf(stderr, "rz-wsbench: connection %zu lost: %s\n", c.slot(), why.c_str());
}

void Bench::start() {
  std::size_t open = 0;
  for (auto& c : conns_) open += c->open();
  if (open == 0) {  // every connection failed: run() reports the first error
    signals_.cancel();
    return;
  }
  started_ = true;
  if (open < conns_.size())
    std::fprintf(stderr, "rz-wsbench: going on with %zu of %zu connections\n", open, conns_.size());
  t_start_ = now();
  deadline_.expires_after(seconds(o_.timeout_s));
  deadline_.async_wait([this](beast::error_code ec) {
    if (!ec) abort_run(kErrTimeout);
  });
  if (o_.rate) {
    next_arrival();
  } else {
    for (auto& c : conns_) fill(*c);
  }
  maybe_finish();
}

bool Bench::may_issue() const {
  if (stopping_) return false;
  if (o_.requests && results_.issued >= static_cast<uint64_t>(*o_.requests)) return false;
  if (o_.duration_s && now() - t_start_ >= *o_.duration_s) return false;
  return true;
}

void Bench::issue(Client& c) {
  const uint64_t index = results_.issued++;
  ++in_flight_;
  results_.peak_in_flight = std::max(results_.peak_in_flight, in_flight_);
  c.send(make_request(o_, index), now());
}

// Closed loop: an open connection with nothing running gets the next request.
void Bench::fill(Client& c) {
  if (c.open() && c.running() == 0 && may_issue()) issue(c);
}

void Bench::next_arrival() {
  if (!may_issue()) {
    arrivals_done_ = true;
    return;
  }
  const double t = arrivals_.next();
  if (o_.duration_s && t >= *o_.duration_s) {
    arrivals_done_ = true;
    return;
  }
  arrival_timer_.expires_at(origin_ + seconds(t_start_ + t));
  arrival_timer_.async_wait([this](beast::error_code ec) {
    if (!ec) on_arrival();
  });
}

// Open loop: the request goes to the next open connection, round-robin (--api openai: the next
// open one with no request running, or else a new connection while any is alive); with none it
// is counted as not sent.
Client* Bench::open_loop_target() {
  const bool one_at_a_time = o_.api == Api::openai;
  bool any_live = false;
  for (std::size_t k = 0; k < conns_.size(); ++k) {
    Client& c = *conns_[(rr_ + k) % conns_.size()];
    any_live |= !c.dead();
    if (c.open() && (!one_at_a_time || c.running() == 0)) {
      rr_ = (rr_ + k + 1) % conns_.size();
      return &c;
    }
  }
  if (!one_at_a_time || !any_live) return nullptr;
  conns_.push_back(make_client(conns_.size()));
  ++grown_;
  return conns_.back().get();  // connects when given the request
}

void Bench::on_arrival() {
  Client* target = open_loop_target();
  if (target) {
    issue(*target);
  } else {
    ++results_.issued;
    results_.add_error(kErrNotSent);
  }
  next_arrival();
  maybe_finish();
}

void Bench::request_completed(Client& c, const Completed& done) {
  results_.add_completed(done.metrics);
  results_.prompt_tokens += done.prompt_tokens;
  ++results_.finish_reasons[done.finish_reason];
  if (done.usage_mismatch) ++results_.usage_mismatches;
  if (done.server_ttft_ms) results_.server_ttft_ms.push_back(*done.server_ttft_ms);
  request_ended(c);
}

void Bench::request_failed(Client& c, const std::string& code, const std::string& message) {
  results_.add_error(code);
  if (!message.empty() && !stopping_ && reported_.insert(code).second)
    std::fprintf(stderr, "rz-wsbench: connection %zu: error %s: %s\n", c.slot(), code.c_str(),
                 message.c_str());
  request_ended(c);
}

void Bench::request_ended(Client& c) {
  --in_flight_;
  t_end_ = now();
  if (stopping_) return;
  if (!o_.rate) fill(c);
  maybe_finish();
}

void Bench::maybe_finish() {
  if (!started_ || stopping_) return;
  bool any_live = false;
  for (auto& c : conns_) any_live |= !c->dead();
  bool issuing = o_.rate ? !arrivals_done_ : may_issue();
  if (!any_live) issuing = false;
  if (issuing || in_flight_ > 0) return;
  finish();
}

// Every request has ended and no more will be issued: close the connections politely.
void Bench::finish() {
  stopping_ = true;
  t_end_ = now();
  deadline_.cancel();
  arrival_timer_.cancel();
  signals_.cancel();
  // A server that does not answer the closing handshake must not hold the run.
  deadline_.expires_after(seconds(kCloseTimeoutS));
  deadline_.async_wait([this](beast::error_code ec) {
    if (!ec) ioc_.stop();
  });
  for (auto& c : conns_) c->close();
  if (closing_left_ == 0) deadline_.cancel();
}

// --timeout or a signal: requests still running are counted as failed with `code`.
void Bench::abort_run(const char* code) {
  if (stopping_) return;
  stopping_ = true;
  t_end_ = now();
  std::fprintf(stderr, "rz-wsbench: %s with %llu request(s) running\n",
               code == kErrTimeout ? "timed out" : code,
               static_cast<unsigned long long>(in_flight_));
  for (auto& c : conns_) c->kill(code);
  ioc_.stop();
}

}  // namespace
}  // namespace rz::wsbench

int main(int argc, char** argv) {
  using namespace rz::wsbench;
  Options o;
  try {
    o = parse_args(std::vector<std::string>(argv + 1, argv + argc));
    key_from_environment(o, std::getenv("RZ_API_KEY"));
  } catch (const rz::Error& e) {
    std::fprintf(stderr, "rz-wsbench: %s\n", e.what());
    return 2;
  }
  if (o.help) {
    std::fputs(usage().c_str(), stdout);
    return 0;
  }
  try {
    return Bench(o).run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rz-wsbench: %s\n", e.what());
    return 1;
  }
}
