// Flags on CLI11: the commands declare Flag lists; CLI11 reads the command line and --config
// files and runs each flag's type check. The help text is our own (one format for every command:
// metavar, help and default on one line), as are the error messages, which name the flag.
#include <CLI/CLI.hpp>
#include <fmt/ranges.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "bench/cli.h"
#include "engine/check.h"
#include "engine/config_file.h"

namespace pb {

const std::vector<FlagAlias>& deprecated_flag_aliases() {
  static const std::vector<FlagAlias> aliases = {
      {"repetitions", "reps"}, {"profile-reps", "reps"}, {"batches", "batch"}};
  return aliases;
}

int64_t parse_int_flag(const std::string& flag, const std::string& s) {
  std::optional<int64_t> v;
  try {
    std::size_t used = 0;
    const long long x = std::stoll(s, &used);
    if (used == s.size()) v = x;
  } catch (const std::out_of_range&) {  // beyond 64 bits: outside every range
    int_flag_range_error(flag, s);
  } catch (const std::exception&) {
  }
  if (!v) throw UsageError(fmt::format("flag --{} expects an integer, got '{}'", flag, s));
  check_int_flag(flag, *v, s);
  return *v;
}

std::vector<int64_t> parse_int_list_flag(const std::string& flag, const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      std::size_t used = 0;
      out.push_back(std::stoll(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::out_of_range&) {
      int_flag_range_error(flag, s);
    } catch (const std::exception&) {
      throw UsageError(fmt::format("flag --{} expects a comma-separated list of integers, got '{}'", flag, s));
    }
    check_int_flag(flag, out.back(), s);
  }
  return out;
}

double parse_number_flag(const std::string& flag, const std::string& s) {
  try {
    std::size_t used = 0;
    const double v = std::stod(s, &used);
    if (used == s.size() && std::isfinite(v)) return v;
  } catch (const std::exception&) {
  }
  throw UsageError(fmt::format("flag --{} expects a finite number, got '{}'", flag, s));
}

namespace {

FlagType resolved_type(const Flag& f) {
  if (f.type != FlagType::Auto) return f.type;
  if (f.value.empty()) return FlagType::Switch;
  if (!has_int_flag_range(f.name) || f.value.find('|') != std::string::npos) return FlagType::Text;
  return f.value.find("LIST") != std::string::npos || f.value.find(',') != std::string::npos ? FlagType::IntList
                                                                                              : FlagType::Integer;
}

// A config file's value for a switch: true or false in TOML's and INI's spellings.
std::optional<bool> truth(const std::string& v) {
  static const std::set<std::string> yes = {"true", "1", "yes", "on"}, no = {"false", "0", "no", "off"};
  if (yes.count(v)) return true;
  if (no.count(v)) return false;
  return std::nullopt;
}

// The name a command-line argument spells (--name or --name=value), or empty.
std::string spelled(const std::string& a) {
  if (a.rfind("--", 0) != 0 || a.size() == 2) return "";
  return a.substr(2, a.find('=') == std::string::npos ? std::string::npos : a.find('=') - 2);
}

}  // namespace

Flags::Flags(std::string command, std::string summary, std::vector<Flag> flags)
    : command_(std::move(command)), summary_(std::move(summary)), flags_(std::move(flags)) {}

const Flag& Flags::find(const std::string& name) const {
  for (const Flag& f : flags_)
    if (f.name == name) return f;
  throw Error(fmt::format("internal: flag --{} not declared for {}", name, command_));
}

bool Flags::parse(const std::vector<std::string>& args, const std::string& passthrough_prefix) {
  std::map<std::string, const Flag*> by_name;  // declared names and the aliases that apply
  for (const Flag& f : flags_) by_name[f.name] = &f;
  std::map<std::string, std::string> alias_of;
  for (const FlagAlias& a : deprecated_flag_aliases())
    if (by_name.count(a.name) && !by_name.count(a.old_name)) alias_of[a.old_name] = a.name;
  auto canonical = [&](const std::string& n) { return alias_of.count(n) ? alias_of.at(n) : n; };
  std::set<std::string> warned;  // one warning per old spelling, however often it is given
  auto warn_alias = [&](const std::string& old_name, const std::string& where) {
    if (warned.insert(old_name).second)
      fmt::print(stderr, "{}: warning: --{}{} is deprecated: use --{}\n", command_, old_name, where, alias_of.at(old_name));
  };

  // What CLI11 would word otherwise, or accept: --help anywhere, a switch given a value, a value
  // flag at the end with none.
  std::set<std::string> on_command_line;
  // A --config file, before CLI11 reads it: its syntax (check_config_file), then its keys, each
  // a flag of this command (CLI11 skips keys it does not know; a typo in a kept sweep must not
  // run a different one) given as many values as the flag takes.
  auto check_config = [&](const std::string& file) {
    check_config_file(file);
    std::map<std::string, std::string> given;  // flag -> the key that set it (an old spelling is the same flag)
    for (const CLI::ConfigItem& item : CLI::ConfigTOML().from_file(file)) {
      if (item.name == "++" || item.name == "--") continue;
      const std::string key = item.fullname();
      if (!item.parents.empty() || !by_name.count(canonical(key)))
        throw UsageError(fmt::format("{}: unknown key '{}' for {} (keys are its flags without the --; see {} --help)", file,
                                     key, command_, command_));
      if (alias_of.count(key)) warn_alias(key, fmt::format(" (in {})", file));
      const auto [first, fresh] = given.emplace(canonical(key), key);
      if (!fresh)
        throw UsageError(fmt::format("{}: keys '{}' and '{}' both set --{}: give one", file, first->second, key, first->first));
      // A list (or words apart) for a flag of one value: CLI11 would join them into one "a,b".
      const Flag& fl = *by_name.at(canonical(key));
      const bool takes_list = fl.value.find("LIST") != std::string::npos || fl.value.find(',') != std::string::npos;
      if (!takes_list && item.inputs.size() > 1)
        throw UsageError(fmt::format("{}: key '{}' takes one value ({}), got {}: {}", file, key,
                                     fl.value.empty() ? "true or false" : fl.value, item.inputs.size(),
                                     fmt::join(item.inputs, ", ")));
    }
  };
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      std::fputs(help().c_str(), stdout);
      return false;
    }
    if (a == "--") break;
    if (a == "--config" && i + 1 < args.size()) check_config(args[i + 1]);
    if (a.rfind("--config=", 0) == 0) check_config(a.substr(9));
    const std::string name = spelled(a);
    const auto it = by_name.find(canonical(name));
    if (name.empty() || it == by_name.end()) continue;
    if (alias_of.count(name)) warn_alias(name, "");
    on_command_line.insert(it->first);
    const bool inline_value = a.find('=') != std::string::npos;
    if (resolved_type(*it->second) == FlagType::Switch) {
      if (inline_value) throw UsageError(fmt::format("flag --{} takes no value", name));
    } else if (!inline_value) {
      if (i + 1 >= args.size()) throw UsageError(fmt::format("flag --{} needs a value ({})", name, it->second->value));
      ++i;
    }
  }

  CLI::App app(summary_, command_);
  app.set_help_flag();
  app.allow_extras();
  app.set_config("--config");
  std::vector<std::string> positional;
  app.add_option("positional", positional);
  std::map<std::string, CLI::Option*> options;
  for (const Flag& f : flags_) {
    std::string names = "--" + f.name;
    for (const auto& [old_name, name] : alias_of)
      if (name == f.name) names += ",--" + old_name;
    const FlagType type = resolved_type(f);
    CLI::Option* o = type == FlagType::Switch ? app.add_flag(names, f.help) : app.add_option(names, f.help);
    if (type != FlagType::Switch) o->type_name(f.value)->expected(1);
    o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // as before: the last one given wins
    const std::string flag = f.name;
    o->check(CLI::Validator(
        [flag, type, &on_command_line, &app](std::string& v) {  // UsageError in our wording: CLI11 lets it through
          try {
            if (type == FlagType::Integer) parse_int_flag(flag, v);
            if (type == FlagType::IntList) parse_int_list_flag(flag, v);
            if (type == FlagType::Number) parse_number_flag(flag, v);
            if (type == FlagType::Switch && !truth(v))
              throw UsageError(fmt::format("flag --{} is a switch: true or false, got '{}'", flag, v));
          } catch (const UsageError& e) {
            if (on_command_line.count(flag)) throw;
            throw UsageError(fmt::format("{}: key '{}': {}", app.get_config_ptr()->as<std::string>(), flag, e.what()));
          }
          return std::string();
        },
        f.value));
    options[f.name] = o;
  }

  try {
    app.parse(std::vector<std::string>(args.rbegin(), args.rend()));  // CLI11 takes them last first
  } catch (const CLI::FileError&) {
    throw UsageError(fmt::format("--config {}: cannot read the file", app.get_config_ptr()->as<std::string>()));
  } catch (const CLI::ParseError& e) {
    throw UsageError(fmt::format("{} (see {} --help)", e.what(), command_));
  }
  if (app.get_config_ptr()->count() > 0) config_file_ = app.get_config_ptr()->as<std::string>();

  for (const std::string& a : app.remaining()) {
    if (!passthrough_prefix.empty() && a.rfind(passthrough_prefix, 0) == 0) {
      passthrough_.push_back(a);
      continue;
    }
    const std::string name = a.rfind("--", 0) == 0 ? "--" + spelled(a) : a;
    throw UsageError(fmt::format("unknown flag {} for '{}' (see {} --help)", name, command_, command_));
  }
  positional_ = positional;
  for (const Flag& f : flags_) {
    const CLI::Option* o = options.at(f.name);
    if (o->count() == 0) continue;
    const std::vector<std::string>& r = o->results();
    if (resolved_type(f) == FlagType::Switch) {
      if (*truth(r.back())) values_[f.name] = "1";
      continue;
    }
    // The command line's last value; a file's list ([1, 2]) comes as one value per item.
    std::string v = r.back();
    if (!on_command_line.count(f.name)) {
      v.clear();
      for (std::size_t i = 0; i < r.size(); ++i) v += (i ? "," : "") + r[i];
    }
    values_[f.name] = v;
  }
  return true;
}

std::string Flags::help() const {
  std::ostringstream out;
  out << "usage: " << command_ << " [flags]\n\n" << summary_ << "\n\nflags:\n";
  auto line = [&](const std::string& left, const std::string& text) {
    out << left << std::string(left.size() < 30 ? 30 - left.size() : 1, ' ') << text << "\n";
  };
  for (const Flag& f : flags_) {
    std::string text = f.help;
    if (f.name == "out")  // one word for what --out names, the same in every command
      text = (f.value == "DIR" ? "a folder: " : f.value == "PREFIX" ? "a prefix: " : f.value.rfind("FILE", 0) == 0 ? "a file: " : "") + text;
    if (!f.fallback.empty()) text += " (default: " + f.fallback + ")";
    line("  --" + f.name + (f.value.empty() ? "" : " " + f.value), text);
  }
  line("  --config FILE", "read flags from a TOML or INI file: one `name = value` per flag, names without the --; "
                          "flags on the command line win");
  line("  --help", "this text");
  return out.str();
}

bool Flags::has(const std::string& name) const {
  find(name);
  return values_.count(name) > 0;
}

std::string Flags::str(const std::string& name) const {
  const Flag& f = find(name);
  auto it = values_.find(name);
  return it != values_.end() ? it->second : f.fallback;
}

int64_t Flags::integer(const std::string& name) const { return parse_int_flag(name, str(name)); }

double Flags::number(const std::string& name) const { return parse_number_flag(name, str(name)); }

std::vector<int64_t> Flags::int_list(const std::string& name) const { return parse_int_list_flag(name, str(name)); }

}  // namespace pb
