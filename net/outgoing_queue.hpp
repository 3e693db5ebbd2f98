// The bounded queue of typed server frames waiting to be written to one WebSocket connection.
// net/ws_session.cpp owns one per connection (touched only on the connection's strand): frames
// from the engine are pushed here, the writer pops one at a time and serializes it only then.
//
//   engine session ──deliver──▶ strand ──push──▶ [frame][frame]...[frame] ──pop──▶ async_write
//                                                 ▲ token frames of one request merge here
//
// Coalescing: a token frame whose request (and choice) already has a token frame waiting (the
// last waiting frame of that id and choice, not yet being written) is merged into it: text
// concatenated, tokens and log-probability entries appended, index of the first. So a reader that falls behind gets fewer, larger frames. When the queue is
// still over its bound (frames or estimated bytes) after that, push() says so; the connection
// then tells the engine once (Session::slow_consumer) and keeps queuing the few frames that end
// the session's requests. Past the hard bound (over_hard_limit) the connection is closed: a
// client that sends frames without reading the answers cannot grow the queue without end.
#pragma once
#include <cstddef>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>

#include "proto/messages.hpp"

namespace rz::net {

struct OutgoingQueueLimits {
  std::size_t max_frames = 512;      // frames waiting (after coalescing)
  std::size_t max_bytes = 4u << 20;  // estimated serialized bytes waiting
};

// Estimated JSON size of a frame (an upper bound of append_json's output for ASCII text; used
// for the byte bound only, never for framing).
std::size_t estimated_bytes(const proto::ServerFrame& f);

class OutgoingQueue {
 public:
  explicit OutgoingQueue(OutgoingQueueLimits limits = {}) : limits_(limits) {}

  struct PushResult {
    bool coalesced = false;   // merged into a waiting token frame of the same request
    bool over_limit = false;  // the queue now exceeds a bound (the frame is kept all the same)
  };
  // Adds a frame, merging a token frame into its request's waiting token frame when there is
  // one.
  PushResult push(proto::ServerFrame frame);
  // The oldest waiting frame, removed; nullopt when empty.
  std::optional<proto::ServerFrame> pop();

  bool empty() const { return frames_.empty(); }
  std::size_t size() const { return frames_.size(); }
  std::size_t bytes() const { return bytes_; }
  bool over_limit() const {
    return frames_.size() > limits_.max_frames || bytes_ > limits_.max_bytes;
  }
  // Past twice the bound (plus 64 frames / 64 KiB of slack for the frames that end the
  // connection's requests): the connection is closed as a slow consumer. Every frame counts,
  // error frames answering the client's own bad frames included.
  bool over_hard_limit() const {
    return frames_.size() > 2 * limits_.max_frames + 64 ||
           bytes_ > 2 * limits_.max_bytes + (64u << 10);
  }
  const OutgoingQueueLimits& limits() const { return limits_; }
  void clear();

 private:
  struct Entry {
    proto::ServerFrame frame;
    std::size_t bytes;
    uint64_t seq;  // push order, to find an entry again after pops
  };
  OutgoingQueueLimits limits_;
  std::deque<Entry> frames_;
  std::size_t bytes_ = 0;
  uint64_t next_seq_ = 0;   // seq of the next pushed entry
  uint64_t front_seq_ = 0;  // seq of frames_.front()
  // Request id and choice (stream_key) -> seq of its last waiting frame when that frame is a
  // token frame.
  static std::string stream_key(const std::string& id, const std::optional<int>& choice);
  std::unordered_map<std::string, uint64_t> last_token_;
};

}  // namespace rz::net
