// Stop strings, matched on the text of a request as it streams (text level, across token
// boundaries). The session actor (actors/session_stream.hpp) pushes each piece of decoded text;
// the matcher releases only text that can no longer be the start of a stop string, and on a match
// releases the text before the stop string and nothing after it.
//
//   push("Hel")  -> "Hel"            stops {"\n\n", "END"}
//   push("lo\n") -> "lo"     held "\n" (could start "\n\n")
//   push("\nX")  -> ""       matched: the text ends before "\n\n"
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace rz::engine {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);  // empty strings are ignored

  struct Result {
    std::string text;      // text released by this push
    bool stopped = false;  // a stop string matched: `text` is everything before it
  };
  // After a match, further pushes release nothing.
  Result push(std::string_view text);
  // The held-back text, released because no stop string can complete any more.
  std::string flush();
  bool stopped() const { return stopped_; }
  bool holding() const { return !held_.empty(); }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace rz::engine
