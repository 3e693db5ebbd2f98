// A small declarative flag parser for the rz subcommands: every flag is declared once with its
// help text, so `rz SUB --help` always lists every flag.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace rz::cli {

class Flags {
 public:
  Flags(std::string command, std::string summary);
  // A flag that takes a value ("--model FILE"). `def` is shown in --help when not empty.
  Flags& opt(const std::string& name, const std::string& metavar, const std::string& help,
             const std::string& def = "");
  // A boolean switch ("--chat").
  Flags& sw(const std::string& name, const std::string& help);

  // Parses argv (after the subcommand). Returns false after printing help (--help) or an error
  // (unknown flag, missing value); `exit_code` is then what the command should return.
  bool parse(int argc, char** argv, int& exit_code);

  bool has(const std::string& name) const;         // given on the command line (or a set switch)
  std::string str(const std::string& name) const;  // value or default ("" if neither)
  // Every value a repeatable flag was given, in order (str() is the last).
  std::vector<std::string> all(const std::string& name) const;
  // Typed values; throw rz::Error("--name: expected ...") on malformed input.
  long long integer(const std::string& name) const;
  double number(const std::string& name) const;
  std::string help() const;

 private:
  struct Spec {
    std::string metavar, help, def;
    bool is_switch = false;
  };
  std::string command_, summary_;
  std::vector<std::string> order_;
  std::map<std::string, Spec> specs_;
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<std::string>> repeats_;
};

}  // namespace rz::cli
