// check_config_text: a line scanner for the TOML / INI subset --config accepts (CLI11's reader
// skips what it cannot parse, so a typo would silently run another configuration).
#include "engine/config_file.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <map>

#include <fmt/format.h>

#include "engine/check.h"
#include "engine/fsutil.h"

namespace pb {

namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

bool key_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'; }

}  // namespace

void check_config_text(const std::string& text, const std::string& source) {
  std::map<std::string, int> first_line;  // key (with its section) -> line
  std::string section;
  int depth = 0, list_line = 0;  // an open [ list and the line it opened on
  std::size_t pos = 0;
  int line_no = 0;
  auto fail = [&](int line, const std::string& what) {
    throw UsageError(fmt::format("{}:{}: {}", source, line, what));
  };
  while (pos < text.size()) {
    ++line_no;
    const std::size_t end = std::min(text.find('\n', pos), text.size());
    const std::string raw = text.substr(pos, end - pos);
    pos = end + 1;
    if (raw.find('\0') != std::string::npos) fail(line_no, "not a text file (a NUL byte)");
    // Scans `s` as values: strings closed on their line, brackets counted into `depth`; stops at
    // a comment. Returns what follows the last closed value, to check nothing is left over.
    auto scan = [&](const std::string& s) {
      for (std::size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        if (c == '"' || c == '\'') {
          const std::size_t close = s.find(c, i + 1);
          if (close == std::string::npos) fail(line_no, fmt::format("unterminated string (a {} is not closed)", c));
          i = close;
        } else if (c == '[') {
          ++depth;
        } else if (c == ']') {
          if (--depth < 0) fail(line_no, "a ']' closes no list");
        } else if (c == '#' || c == ';') {
          return;
        }
      }
    };
    const std::string line = trim(raw);
    if (depth > 0) {  // inside a list that spans lines
      scan(line);
      continue;
    }
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line[0] == '[') {
      const std::size_t close = line.find(']');
      const std::string rest = close == std::string::npos ? "" : trim(line.substr(close + 1));
      if (close == std::string::npos || close == 1 || (!rest.empty() && rest[0] != '#' && rest[0] != ';'))
        fail(line_no, fmt::format("expected a [section] or `name = value`, got '{}'", line));
      section = trim(line.substr(1, close - 1)) + ".";
      continue;
    }
    const std::size_t eq = line.find('=');
    if (eq == std::string::npos) fail(line_no, fmt::format("expected `name = value`, got '{}'", line));
    const std::string key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
    if (key.empty()) fail(line_no, "a value without a name");
    for (char c : key)
      if (!key_char(c)) fail(line_no, fmt::format("'{}' is not a flag name (letters, digits, - and _)", key));
    if (value.empty() || value[0] == '#' || value[0] == ';') fail(line_no, fmt::format("key '{}' has no value", key));
    const auto [it, fresh] = first_line.emplace(section + key, line_no);
    if (!fresh) fail(line_no, fmt::format("key '{}' given twice (first on line {})", key, it->second));
    scan(value);
    if (depth > 0) list_line = line_no;
    // After a closed string or list, only a comment may follow.
    if (depth == 0 && (value[0] == '"' || value[0] == '\'' || value[0] == '[')) {
      std::size_t close = value[0] == '[' ? std::string::npos : value.find(value[0], 1);
      if (value[0] == '[') {
        int d = 0;
        for (std::size_t i = 0; i < value.size() && close == std::string::npos; ++i) {
          if (value[i] == '"' || value[i] == '\'') {
            i = value.find(value[i], i + 1);
            if (i == std::string::npos) break;
          } else if (value[i] == '[') {
            ++d;
          } else if (value[i] == ']' && --d == 0) {
            close = i;
          }
        }
      }
      const std::string rest = trim(value.substr(close + 1));
      if (!rest.empty() && rest[0] != '#' && rest[0] != ';')
        fail(line_no, fmt::format("key '{}': unexpected '{}' after its value", key, rest));
    }
  }
  if (depth > 0) fail(list_line, "unterminated list (a [ is not closed by the end of the file)");
}

void check_config_file(const std::string& path) {
  // Said as the flag's own error (the file may be missing or unreadable), before the size check.
  if (::access(path.c_str(), R_OK) != 0)
    throw UsageError(fmt::format("--config {}: cannot read the file ({})", path, std::strerror(errno)));
  check_config_text(read_file(path, kConfigFileLimit, "config"), path);
}

}  // namespace pb
