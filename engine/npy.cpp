// .npy reading and writing: a small parser for the header's Python dict literal, and a writer
// that pads the header exactly as numpy.save does.
#include "engine/npy.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "engine/check.h"
#include "engine/fsutil.h"
#include "engine/memory_estimate.h"

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

namespace {

// Where the header ends, from the file's first bytes (magic, version, header length); 0 when those
// are not all there or not valid (parse_npy then names the problem).
std::size_t header_end(const std::string& b) {
  if (b.size() < kMagicLen + 2 || b.compare(0, kMagicLen, kMagic, kMagicLen) != 0) return 0;
  const int major = static_cast<unsigned char>(b[6]);
  if (major < 1 || major > 3) return 0;
  const int len_bytes = major == 1 ? 2 : 4;
  const std::size_t start = kMagicLen + 2 + len_bytes;
  if (b.size() < start) return 0;
  return start + le_uint(b, kMagicLen + 2, len_bytes);
}

struct Layout {
  Shape shape;
  std::size_t data_start = 0;
  uint64_t n = 0, nbytes = 0;
};

// Magic, version and header of `b`, which must hold at least the whole header.
Layout parse_layout(const std::string& b, const std::string& path) {
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
  Layout l;
  HeaderParser(path, std::string_view(b).substr(start, header_len)).parse(descr, fortran, l.shape);
  if (descr != "<f4" && descr != "=f4")
    bad(path,
        fmt::format("dtype '{}' not supported, expected '<f4' (float32 little-endian)", descr));
  // With at most one dimension both orders are the same bytes.
  if (fortran && l.shape.size() > 1)
    bad(path, "fortran_order True not supported, expected C order");

  l.n = 1;
  bool overflow = false;
  for (int64_t d : l.shape) overflow |= __builtin_mul_overflow(l.n, static_cast<uint64_t>(d), &l.n);
  overflow |= __builtin_mul_overflow(l.n, uint64_t{sizeof(float)}, &l.nbytes);
  if (overflow) bad(path, fmt::format("shape {} too large", tuple_str(l.shape)));
  l.data_start = start + header_len;
  return l;
}

void check_data_size(const Layout& l, uint64_t have, const std::string& path) {
  if (have != l.nbytes)
    bad(path, fmt::format("{} data: header says shape {} = {} floats ({} bytes), file has {} "
                          "bytes of data",
                          have < l.nbytes ? "truncated" : "trailing", tuple_str(l.shape), l.n,
                          l.nbytes, have));
}

}  // namespace

NpyArray parse_npy(const std::string& b, const std::string& path) {
  const Layout l = parse_layout(b, path);
  check_data_size(l, b.size() - l.data_start, path);
  NpyArray arr;
  arr.shape = l.shape;
  arr.data.resize(l.n);
  if (l.n) std::memcpy(arr.data.data(), b.data() + l.data_start, l.nbytes);
  return arr;
}

void check_finite(const NpyArray& a, const std::string& path) {
  for (std::size_t i = 0; i < a.data.size(); ++i)
    if (!std::isfinite(a.data[i]))
      bad(path, fmt::format("value {} at flat index {} is not finite; inputs and parameters must be "
                            "finite numbers", a.data[i], i));
}

NpyArray read_npy(const std::string& path) {
  // Read no more than the header promises (plus one byte, to detect trailing data), so an endless
  // or huge file costs no more memory than a valid one.
  constexpr std::size_t kMaxHeader = std::size_t{1} << 20;
  FileReader r(path);
  std::string b;
  r.append(b, kMagicLen + 2 + 4);
  const std::size_t hend = header_end(b);
  if (hend > kMaxHeader)
    bad(path, fmt::format("header of {} bytes: not a plausible .npy file (at most {})", hend, kMaxHeader));
  if (hend > b.size()) r.append(b, hend - b.size());
  if (hend == 0 || b.size() < hend) return parse_npy(b, path);  // names the malformation
  const Layout l = parse_layout(b, path);
  // The data size is known now: refuse a mismatch before reading (and allocating) any data.
  if (r.regular()) check_data_size(l, r.size() - hend, path);
  if (!r.regular() && l.nbytes > available_ram_bytes())
    bad(path, fmt::format("header says shape {} = {} bytes of data, more than the available RAM", tuple_str(l.shape),
                          l.nbytes));
  const uint64_t want = l.nbytes + 1, already = b.size() - hend;
  if (want > already) r.append(b, static_cast<std::size_t>(std::min<uint64_t>(want - already, SIZE_MAX - b.size())));
  return parse_npy(b, path);
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
