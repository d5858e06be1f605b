// Tests for .npy reading/writing (against bytes numpy 1.24 wrote) and the file helpers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>

#include "engine/check.h"
#include "engine/fsutil.h"
#include "engine/npy.h"

namespace pb {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string temp_path(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) /
          ("pb_npy_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

// A .npy file (format `version`.0) with a hand-written header dict, padded as numpy pads.
std::string npy_bytes(const std::string& dict, const std::string& data, int version = 1) {
  const std::size_t len_bytes = version == 1 ? 2 : 4;
  std::string header = dict;
  header.append(64 - (6 + 2 + len_bytes + header.size() + 1) % 64, ' ').push_back('\n');
  std::string out = "\x93NUMPY";
  out += static_cast<char>(version);
  out += '\0';
  for (std::size_t i = 0; i < len_bytes; ++i)
    out += static_cast<char>(header.size() >> (8 * i) & 0xff);
  return out + header + data;
}

std::string float_bytes(std::vector<float> v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

// The UsageError message read_npy throws for `bytes` written to a file called `name`.
std::string npy_error(const std::string& name, const std::string& bytes,
                      const Shape* expected = nullptr) {
  const std::string path = temp_path(name);
  write_file_atomic(path, bytes);
  std::string msg;
  try {
    expected ? read_npy(path, *expected) : read_npy(path);
    ADD_FAILURE() << "no UsageError reading " << path;
  } catch (const UsageError& e) {
    msg = e.what();
  }
  std::filesystem::remove(path);
  return msg;
}

// Bytes numpy 1.24 wrote; hex of the file from
// np.save(f, np.array([[1.5, -2.25, 0.0], [3e-8, 1e30, -0.0]], '<f4'))
const char* const kNumpy2x3 =
    "934e554d5059010076007b276465736372273a20273c6634272c2027666f727472616e5f6f72646572273a20"
    "46616c73652c20277368617065273a2028322c2033292c207d20202020202020202020202020202020202020"
    "2020202020202020202020202020202020202020202020202020202020202020202020202020200a0000c03f"
    "000010c00000000059d90033caf2497100000080";
// np.save(f, np.array(7.0, '<f4'))
const char* const kNumpy0d =
    "934e554d5059010076007b276465736372273a20273c6634272c2027666f727472616e5f6f72646572273a20"
    "46616c73652c20277368617065273a2028292c207d2020202020202020202020202020202020202020202020"
    "2020202020202020202020202020202020202020202020202020202020202020202020202020200a0000e040";
// np.lib.format.write_array(f, np.arange(5, dtype='<f4'), version=(3, 0))
const char* const kNumpyV3 =
    "934e554d50590300740000007b276465736372273a20273c6634272c2027666f727472616e5f6f7264657227"
    "3a2046616c73652c20277368617065273a2028352c292c207d20202020202020202020202020202020202020"
    "2020202020202020202020202020202020202020202020202020202020202020202020202020200a00000000"
    "0000803f000000400000404000008040";

TEST(Npy, ReadsNumpyFiles) {
  const std::string p = temp_path("numpy_2x3.npy");
  write_file_atomic(p, from_hex(kNumpy2x3));
  NpyArray a = read_npy(p, {2, 3});
  EXPECT_EQ(a.shape, (Shape{2, 3}));
  EXPECT_EQ(a.data, (std::vector<float>{1.5f, -2.25f, 0.0f, 3e-8f, 1e30f, -0.0f}));
  EXPECT_TRUE(std::signbit(a.data[5]));

  write_file_atomic(p, from_hex(kNumpy0d));
  a = read_npy(p);
  EXPECT_EQ(a.shape, Shape{});
  EXPECT_EQ(a.data, std::vector<float>{7.0f});

  write_file_atomic(p, from_hex(kNumpyV3));
  a = read_npy(p);
  EXPECT_EQ(a.shape, Shape{5});
  EXPECT_EQ(a.data, (std::vector<float>{0, 1, 2, 3, 4}));
  std::filesystem::remove(p);
}

TEST(Npy, WriterMatchesNumpyByteForByte) {
  const std::string p = temp_path("ours.npy");
  const std::vector<float> v = {1.5f, -2.25f, 0.0f, 3e-8f, 1e30f, -0.0f};
  write_npy(p, {2, 3}, v.data());
  EXPECT_EQ(read_file(p), from_hex(kNumpy2x3));
  const float seven = 7.0f;
  write_npy(p, {}, &seven);
  EXPECT_EQ(read_file(p), from_hex(kNumpy0d));
  std::filesystem::remove(p);
}

TEST(Npy, RoundTripsRandomShapes) {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> val(-1e6f, 1e6f);
  const std::string p = temp_path("round.npy");
  for (int iter = 0; iter < 50; ++iter) {
    Shape shape(rng() % 5);  // 0-d to 4-d, with empty dimensions now and then
    for (auto& d : shape) d = rng() % 6;
    if (iter == 1) shape = {123456};  // a wider first axis changes numpy's header padding
    std::size_t n = 1;
    for (auto d : shape) n *= d;
    std::vector<float> v(n);
    for (auto& x : v) x = val(rng);
    if (n >= 3) {
      v[0] = std::numeric_limits<float>::infinity();
      v[1] = std::numeric_limits<float>::quiet_NaN();
      v[2] = std::numeric_limits<float>::denorm_min();
    }
    write_npy(p, shape, v.data());
    const std::string bytes = read_file(p);
    ASSERT_EQ(bytes.find('\n') + 1, bytes.size() - 4 * n) << "header must end in '\\n'";
    ASSERT_EQ((bytes.size() - 4 * n) % 64, 0u) << "data must start 64-byte aligned";
    const NpyArray a = read_npy(p, shape);
    ASSERT_EQ(a.data.size(), n);
    EXPECT_TRUE(n == 0 || std::memcmp(a.data.data(), v.data(), 4 * n) == 0)
        << "shape rank " << shape.size();
  }
  std::filesystem::remove(p);
}

TEST(Npy, ToleratesOtherHeaderSpellings) {
  const std::string data = float_bytes({1, 2, 3, 4, 5, 6});
  const std::string p = temp_path("spelling.npy");
  for (const char* dict :
       {"{'shape':(2,3),'fortran_order':False,'descr':'<f4'}",
        "{ \"descr\" : \"=f4\" ,\n 'shape' : ( 2 , 3 , ) , 'fortran_order' : False , }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2L, 3L), }"}) {
    write_file_atomic(p, npy_bytes(dict, data));
    EXPECT_EQ(read_npy(p, {2, 3}).data, (std::vector<float>{1, 2, 3, 4, 5, 6})) << dict;
  }
  write_file_atomic(
      p, npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", data, 2));
  EXPECT_EQ(read_npy(p, {6}).data.size(), 6u);
  // One dimension: Fortran and C order are the same bytes.
  write_file_atomic(p, npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (6,), }", data));
  EXPECT_EQ(read_npy(p, {6}).data.size(), 6u);
  std::filesystem::remove(p);
}

TEST(Npy, ErrorsNameTheFileAndWhatWasExpected) {
  const std::string six = float_bytes({1, 2, 3, 4, 5, 6});
  auto dict = [](const std::string& descr, const std::string& fortran, const std::string& shape) {
    return "{'descr': '" + descr + "', 'fortran_order': " + fortran + ", 'shape': " + shape + ", }";
  };
  EXPECT_THAT(npy_error("magic.npy", "hello, world"),
              HasSubstr("magic.npy: not a .npy file (bad magic)"));
  EXPECT_THAT(
      npy_error("f8.npy", npy_bytes(dict("<f8", "False", "(3,)"), std::string(24, '\0'))),
      HasSubstr("f8.npy: dtype '<f8' not supported, expected '<f4' (float32 little-endian)"));
  EXPECT_THAT(npy_error("big.npy", npy_bytes(dict(">f4", "False", "(2, 3)"), six)),
              HasSubstr("big.npy: dtype '>f4' not supported"));
  EXPECT_THAT(npy_error("i4.npy", npy_bytes(dict("<i4", "False", "(2, 3)"), six)),
              HasSubstr("i4.npy: dtype '<i4' not supported"));
  EXPECT_THAT(npy_error("fortran.npy", npy_bytes(dict("<f4", "True", "(2, 3)"), six)),
              HasSubstr("fortran.npy: fortran_order True not supported, expected C order"));
  EXPECT_THAT(
      npy_error("short.npy", npy_bytes(dict("<f4", "False", "(2, 3)"), six.substr(0, 20))),
      HasSubstr("short.npy: truncated data: header says shape (2, 3) = 6 floats (24 bytes), "
                "file has 20 bytes of data"));
  EXPECT_THAT(npy_error("long.npy", npy_bytes(dict("<f4", "False", "(2, 3)"), six + "XXXX")),
              HasSubstr("long.npy: trailing data: header says shape (2, 3) = 6 floats (24 bytes), "
                        "file has 28 bytes of data"));
  const Shape want{3, 2};
  EXPECT_THAT(npy_error("shape.npy", npy_bytes(dict("<f4", "False", "(2, 3)"), six), &want),
              HasSubstr("shape.npy: shape (2, 3), expected (3, 2)"));
  const Shape want1{5};
  EXPECT_THAT(
      npy_error("scalar.npy", npy_bytes(dict("<f4", "False", "()"), six.substr(0, 4)), &want1),
      HasSubstr("scalar.npy: shape (), expected (5,)"));
  EXPECT_THAT(npy_error("version.npy", npy_bytes(dict("<f4", "False", "(6,)"), six, 4)),
              HasSubstr("version.npy: unsupported .npy format version 4.0"));
  EXPECT_THAT(npy_error("header.npy", from_hex(kNumpy2x3).substr(0, 40)),
              HasSubstr("header.npy: truncated header"));
  EXPECT_THAT(npy_error("nokey.npy", npy_bytes("{'descr': '<f4', 'shape': (6,)}", six)),
              HasSubstr("nokey.npy: malformed .npy header: missing key 'fortran_order'"));
  EXPECT_THAT(
      npy_error("extra.npy",
                npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'x': 1}", six)),
      HasSubstr("extra.npy: malformed .npy header: unexpected key 'x'"));
  EXPECT_THAT(
      npy_error("neg.npy", npy_bytes(dict("<f4", "False", "(-6,)"), six)),
      HasSubstr("neg.npy: malformed .npy header: expected a non-negative integer dimension"));
  EXPECT_THAT(
      npy_error("struct.npy",
                npy_bytes("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (6,)}", six)),
      HasSubstr("struct.npy: structured dtype not supported"));
  EXPECT_THAT(
      npy_error("huge.npy", npy_bytes(dict("<f4", "False", "(4294967296, 4294967296)"), six)),
      HasSubstr("huge.npy: shape (4294967296, 4294967296) too large"));

  const std::string missing = temp_path("missing.npy");
  try {
    read_npy(missing);
    ADD_FAILURE() << "no error for a missing file";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "cannot read " + missing + ": No such file or directory");
  }
}

std::vector<std::string> dir_entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    out.push_back(e.path().filename().string());
  return out;
}

TEST(FsUtil, WriteFileAtomicReplacesAndLeavesNoTempFile) {
  const std::string dir = temp_path("atomic_dir");
  std::filesystem::remove_all(dir);
  make_dirs(dir + "/a/b");
  make_dirs(dir + "/a/b");  // already there: fine
  make_dirs("");
  const std::string p = dir + "/a/b/out.json";
  write_file_atomic(p, "first version, longer");
  EXPECT_EQ(read_file(p), "first version, longer");
  write_file_atomic(p, std::string("second\0bytes", 12));
  EXPECT_EQ(read_file(p), std::string("second\0bytes", 12));
  write_file_atomic(p, "");
  EXPECT_EQ(read_file(p), "");
  EXPECT_EQ(dir_entries(dir + "/a/b"), std::vector<std::string>{"out.json"});
  std::filesystem::remove_all(dir);
}

TEST(FsUtil, ErrorsNameThePath) {
  const std::string dir = temp_path("no_such_dir");
  try {
    write_file_atomic(dir + "/x.txt", "data");
    ADD_FAILURE() << "no error writing into a missing directory";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("cannot write " + dir + "/x.txt"),
                                HasSubstr("No such file or directory")));
  }
  EXPECT_THROW(read_file(dir + "/x.txt"), UsageError);
  try {
    read_file(::testing::TempDir());
    ADD_FAILURE() << "no error reading a directory";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("Is a directory"));
  }
  const std::string file = temp_path("plain_file");
  write_file_atomic(file, "x");
  try {
    make_dirs(file + "/sub");
    ADD_FAILURE() << "no error creating a directory under a file";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot create directory " + file + "/sub"));
  }
  std::filesystem::remove(file);
}

}  // namespace
}  // namespace pb
