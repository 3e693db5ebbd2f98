// Shared basics for every component: the error type that carries a one-line, user-facing cause.
#pragma once
#include <stdexcept>
#include <string>

namespace rz {

// Every failure that a user can cause (bad file, bad flag, prompt too long) is an rz::Error whose
// what() is one line naming the cause and, where there is one, the file: "FILE: cause".
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

inline Error file_error(const std::string& path, const std::string& cause) {
  return Error(path + ": " + cause);
}

}  // namespace rz
