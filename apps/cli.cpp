// Flag parsing for the rz subcommands (see cli.hpp).
#include "apps/cli.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "formats/common.hpp"

namespace rz::cli {

Flags::Flags(std::string command, std::string summary)
    : command_(std::move(command)), summary_(std::move(summary)) {
  sw("help", "show this help and exit");
}

Flags& Flags::opt(const std::string& name, const std::string& metavar, const std::string& help,
                  const std::string& def) {
  order_.push_back(name);
  specs_[name] = Spec{metavar, help, def, false};
  return *this;
}

Flags& Flags::sw(const std::string& name, const std::string& help) {
  order_.push_back(name);
  specs_[name] = Spec{"", help, "", true};
  return *this;
}

std::string Flags::help() const {
  std::ostringstream os;
  os << "usage: rz " << command_ << " [flags]\n" << summary_ << "\n\nflags:\n";
  for (const auto& name : order_) {
    const Spec& s = specs_.at(name);
    std::string lhs = "  --" + name + (s.is_switch ? "" : " " + s.metavar);
    os << lhs;
    if (lhs.size() < 26)
      os << std::string(26 - lhs.size(), ' ');
    else
      os << "\n" << std::string(26, ' ');
    os << s.help;
    if (!s.def.empty()) os << " (default: " << s.def << ")";
    os << "\n";
  }
  return os.str();
}

bool Flags::parse(int argc, char** argv, int& exit_code) {
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) {
      std::fprintf(stderr, "rz %s: unexpected argument '%s' (see rz %s --help)\n", command_.c_str(),
                   a.c_str(), command_.c_str());
      exit_code = 2;
      return false;
    }
    std::string name = a.substr(2), value;
    bool inline_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    auto it = specs_.find(name);
    if (it == specs_.end()) {
      std::fprintf(stderr, "rz %s: unknown flag --%s (see rz %s --help)\n", command_.c_str(),
                   name.c_str(), command_.c_str());
      exit_code = 2;
      return false;
    }
    if (it->second.is_switch) {
      if (inline_value) {
        std::fprintf(stderr, "rz %s: --%s takes no value\n", command_.c_str(), name.c_str());
        exit_code = 2;
        return false;
      }
      values_[name] = "1";
    } else {
      if (!inline_value) {
        if (i + 1 >= argc) {
          std::fprintf(stderr, "rz %s: --%s needs a value (%s)\n", command_.c_str(), name.c_str(),
                       it->second.metavar.c_str());
          exit_code = 2;
          return false;
        }
        value = argv[++i];
      }
      values_[name] = value;
      repeats_[name].push_back(value);
    }
  }
  if (has("help")) {
    std::fputs(help().c_str(), stdout);
    exit_code = 0;
    return false;
  }
  return true;
}

bool Flags::has(const std::string& name) const { return values_.count(name) != 0; }

std::vector<std::string> Flags::all(const std::string& name) const {
  if (auto it = repeats_.find(name); it != repeats_.end()) return it->second;
  return {};
}

std::string Flags::str(const std::string& name) const {
  if (auto it = values_.find(name); it != values_.end()) return it->second;
  if (auto it = specs_.find(name); it != specs_.end()) return it->second.def;
  return {};
}

long long Flags::integer(const std::string& name) const {
  std::string v = str(name);
  char* end = nullptr;
  errno = 0;
  long long r = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno != 0)
    throw Error("--" + name + ": expected an integer, got '" + v + "'");
  return r;
}

double Flags::number(const std::string& name) const {
  std::string v = str(name);
  char* end = nullptr;
  errno = 0;
  double r = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || errno != 0)
    throw Error("--" + name + ": expected a number, got '" + v + "'");
  return r;
}

}  // namespace rz::cli
