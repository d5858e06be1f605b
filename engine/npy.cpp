// .npy reading and writing: a small parser for the header's Python dict literal, and a writer
// that pads the header exactly as numpy.save does.
#include "engine/npy.h"

#include <cstdint>
#include <cstring>
#include <string_view>

#include "engine/check.h"
#include "engine/fsutil.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "float32 data is copied as is, so '<f4' needs a little-endian host");

namespace pb {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicLen = 6;

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw UsageError(fmt::format("{}: {}", path, what));
}

// Python's repr of a shape tuple, as the header and error messages show it.
std::string tuple_str(const Shape& s) {
  std::string out = "(";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + (s.size() == 1 ? ",)" : ")");
}

uint32_t le_uint(const std::string& b, std::size_t at, int n) {
  uint32_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = v << 8 | static_cast<unsigned char>(b[at + i]);
  return v;
}

// The header is a Python dict literal; numpy writes one fixed form, but other writers differ
// in key order, spacing, quotes and trailing commas.
class HeaderParser {
 public:
  HeaderParser(const std::string& path, std::string_view text) : path_(path), s_(text) {}

  void parse(std::string& descr, bool& fortran, Shape& shape) {
    static const char* const keys[3] = {"descr", "fortran_order", "shape"};
    bool seen[3] = {false, false, false};
    expect('{');
    while (!eat('}')) {
      const std::string key = str();
      expect(':');
      int k = 0;
      while (k < 3 && key != keys[k]) ++k;
      if (k == 3)
        fail(fmt::format("unexpected key '{}', expected 'descr', 'fortran_order', 'shape'", key));
      if (seen[k]) fail(fmt::format("key '{}' appears twice", key));
      seen[k] = true;
      if (k == 0) {
        ws();
        if (i_ < s_.size() && s_[i_] != '\'' && s_[i_] != '"')
          bad(path_, "structured dtype not supported, expected '<f4' (float32 little-endian)");
        descr = str();
      } else if (k == 1) {
        fortran = boolean();
      } else {
        shape = tuple();
      }
      if (!eat(',')) {
        expect('}');
        break;
      }
    }
    ws();
    if (i_ != s_.size()) fail("unexpected text after the dict");
    for (int k = 0; k < 3; ++k)
      if (!seen[k]) fail(fmt::format("missing key '{}'", keys[k]));
  }

 private:
  [[noreturn]] void fail(const std::string& what) {
    std::string_view shown = s_.substr(0, 200);
    while (!shown.empty() && (shown.back() == ' ' || shown.back() == '\n')) shown.remove_suffix(1);
    bad(path_, fmt::format("malformed .npy header: {} at offset {} in {}", what, i_, shown));
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
      ++i_;
  }
  bool eat(char c) {
    ws();
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail(fmt::format("expected '{}'", c));
  }
  bool word(std::string_view w) {
    ws();
    if (s_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }
  std::string str() {
    ws();
    const char q = i_ < s_.size() ? s_[i_] : 0;
    if (q != '\'' && q != '"') fail("expected a quoted string");
    const std::size_t end = s_.find(q, i_ + 1);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string out(s_.substr(i_ + 1, end - i_ - 1));
    i_ = end + 1;
    return out;
  }
  bool boolean() {
    if (word("True")) return true;
    if (word("False")) return false;
    fail("expected True or False");
  }
  int64_t integer() {
    ws();
    const std::size_t start = i_;
    int64_t v = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, s_[i_] - '0', &v))
        fail("dimension too large");
      ++i_;
    }
    if (i_ == start) fail("expected a non-negative integer dimension");
    if (i_ < s_.size() && s_[i_] == 'L') ++i_;  // Python 2 long suffix in old files
    return v;
  }
  Shape tuple() {
    Shape out;
    expect('(');
    if (eat(')')) return out;
    for (;;) {
      out.push_back(integer());
      if (eat(')')) return out;
      expect(',');
      if (eat(')')) return out;
    }
  }

  const std::string& path_;
  std::string_view s_;
  std::size_t i_ = 0;
};

}  // namespace

NpyArray read_npy(const std::string& path) {
  const std::string b = read_file(path);
  if (b.size() < kMagicLen || b.compare(0, kMagicLen, kMagic, kMagicLen) != 0)
    bad(path, "not a .npy file (bad magic)");
  if (b.size() < kMagicLen + 2) bad(path, "truncated header: file ends after the magic string");
  const int major = static_cast<unsigned char>(b[6]), minor = static_cast<unsigned char>(b[7]);
  if (major < 1 || major > 3 || minor != 0)
    bad(path, fmt::format("unsupported .npy format version {}.{}, expected 1.0, 2.0 or 3.0", major,
                          minor));
  const int len_bytes = major == 1 ? 2 : 4;
  const std::size_t start = kMagicLen + 2 + len_bytes;
  if (b.size() < start) bad(path, "truncated header: file ends inside the header length");
  const std::size_t header_len = le_uint(b, kMagicLen + 2, len_bytes);
  if (b.size() - start < header_len)
    bad(path, fmt::format("truncated header: header length says {} bytes, file has {} after it",
                          header_len, b.size() - start));

  std::string descr;
  bool fortran = false;
  NpyArray arr;
  HeaderParser(path, std::string_view(b).substr(start, header_len))
      .parse(descr, fortran, arr.shape);
  if (descr != "<f4" && descr != "=f4")
    bad(path,
        fmt::format("dtype '{}' not supported, expected '<f4' (float32 little-endian)", descr));
  // With at most one dimension both orders are the same bytes.
  if (fortran && arr.shape.size() > 1)
    bad(path, "fortran_order True not supported, expected C order");

  uint64_t n = 1, nbytes = 0;
  bool overflow = false;
  for (int64_t d : arr.shape) overflow |= __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n);
  overflow |= __builtin_mul_overflow(n, uint64_t{sizeof(float)}, &nbytes);
  if (overflow) bad(path, fmt::format("shape {} too large", tuple_str(arr.shape)));
  const std::size_t have = b.size() - start - header_len;
  if (have != nbytes)
    bad(path, fmt::format("{} data: header says shape {} = {} floats ({} bytes), file has {} "
                          "bytes of data",
                          have < nbytes ? "truncated" : "trailing", tuple_str(arr.shape), n,
                          nbytes, have));
  arr.data.resize(n);
  if (n) std::memcpy(arr.data.data(), b.data() + start + header_len, nbytes);
  return arr;
}

NpyArray read_npy(const std::string& path, const Shape& expected_shape) {
  NpyArray arr = read_npy(path);
  if (arr.shape != expected_shape)
    bad(path,
        fmt::format("shape {}, expected {}", tuple_str(arr.shape), tuple_str(expected_shape)));
  return arr;
}

void write_npy(const std::string& path, const Shape& shape, const float* data) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    PB_CHECK(d >= 0, "negative dimension in shape {} for {}", tuple_str(shape), path);
    n *= static_cast<uint64_t>(d);
  }
  PB_CHECK(data || n == 0, "null data for shape {} writing {}", tuple_str(shape), path);

  std::string header =
      fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': {}, }}", tuple_str(shape));
  // numpy leaves room to grow the first axis in place (GROWTH_AXIS_MAX_DIGITS = 21).
  if (!shape.empty()) header.append(21 - std::to_string(shape[0]).size(), ' ');
  // Pad with spaces and end in '\n' so the data starts on a 64-byte boundary.
  const std::size_t pad = 64 - (kMagicLen + 4 + header.size() + 1) % 64;
  header.append(pad, ' ').push_back('\n');
  PB_CHECK(header.size() <= 0xffff, "header of {} bytes too long for .npy 1.0 ({})", header.size(),
           path);

  std::string out(kMagic, kMagicLen);
  out += {'\x01', '\x00', static_cast<char>(header.size() & 0xff),
          static_cast<char>(header.size() >> 8)};
  out += header;
  if (n) out.append(reinterpret_cast<const char*>(data), n * sizeof(float));
  write_file_atomic(path, out);
}

}  // namespace pb
