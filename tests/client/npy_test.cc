#include "client/npy.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/file_io.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace qmm {
namespace {

using ::testing::HasSubstr;
using namespace std::string_view_literals;

std::vector<uint8_t> Bytes(std::string_view s) { return std::vector<uint8_t>(s.begin(), s.end()); }

// A .npy file with `header` (unpadded is fine: the reader does not require alignment).
std::vector<uint8_t> NpyFile(int major, std::string_view header, std::vector<uint8_t> data) {
  std::vector<uint8_t> out = Bytes("\x93NUMPY");
  out.push_back(static_cast<uint8_t>(major));
  out.push_back(0);
  const int length_bytes = major == 1 ? 2 : 4;
  for (int i = 0; i < length_bytes; ++i) out.push_back((header.size() >> (8 * i)) & 0xff);
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

absl::Status ParseError(const std::vector<uint8_t>& file) { return ParseNpy(file).status(); }

TEST(NpyTest, RoundTripsEveryDtypeAndShape) {
  const ElementType types[] = {ElementType::kF16, ElementType::kF32, ElementType::kF64,
                               ElementType::kI8,  ElementType::kI16, ElementType::kI32,
                               ElementType::kI64, ElementType::kU8,  ElementType::kU16,
                               ElementType::kU32, ElementType::kU64};
  const std::vector<std::vector<int64_t>> shapes = {{}, {7}, {3, 5}, {2, 3, 4}, {0, 4}};
  uint32_t seed = 1;
  for (ElementType type : types) {
    for (const auto& shape : shapes) {
      NdArray a{type, shape, {}};
      a.data = RandomBytes(a.NumElements() * ElementSize(type), seed++);
      absl::StatusOr<std::vector<uint8_t>> file = SerializeNpy(a);
      ASSERT_TRUE(file.ok()) << file.status();
      // NumPy's layout: data 64-byte aligned, header ending in '\n'.
      const size_t data_start = file->size() - a.data.size();
      EXPECT_EQ(data_start % 64, 0u);
      EXPECT_EQ((*file)[data_start - 1], '\n');
      absl::StatusOr<NdArray> back = ParseNpy(*file);
      ASSERT_TRUE(back.ok()) << back.status();
      EXPECT_EQ(back->type, type);
      EXPECT_EQ(back->shape, shape);
      EXPECT_EQ(back->data, a.data);
    }
  }
}

TEST(NpyTest, WritesTheHeaderNumpyWrites) {
  NdArray a{ElementType::kF32, {2, 3}, RandomBytes(24, 3)};
  absl::StatusOr<std::vector<uint8_t>> file = SerializeNpy(a);
  ASSERT_TRUE(file.ok());
  const std::string text(file->begin() + 10, file->end() - 24);
  EXPECT_EQ(text.substr(0, text.find_last_not_of(" \n") + 1),
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }");
  EXPECT_EQ((*file)[6], 1);  // version 1.0
  NdArray v{ElementType::kU8, {5}, RandomBytes(5, 4)};
  file = SerializeNpy(v);
  ASSERT_TRUE(file.ok());
  EXPECT_NE(std::string(file->begin(), file->end()).find("'shape': (5,)"), std::string::npos);
  EXPECT_NE(std::string(file->begin(), file->end()).find("'descr': '|u1'"), std::string::npos);
}

TEST(NpyTest, ReadsVersionsTwoAndThreeAndOldSpellings) {
  const std::vector<uint8_t> data = RandomBytes(2 * 3 * 2, 5);
  for (int major : {1, 2, 3}) {
    absl::StatusOr<NdArray> a = ParseNpy(
        NpyFile(major, "{\"shape\": (2L, 3L), 'fortran_order':False,'descr':'<f2'}\n", data));
    ASSERT_TRUE(a.ok()) << major << ": " << a.status();
    EXPECT_EQ(a->type, ElementType::kF16);
    EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(a->data, data);
  }
  // Native byte order and single-byte types with '<' are accepted too.
  EXPECT_TRUE(ParseNpy(NpyFile(1, "{'descr': '=i4', 'fortran_order': False, 'shape': (1,), }",
                               RandomBytes(4, 6)))
                  .ok());
  EXPECT_TRUE(ParseNpy(NpyFile(1, "{'descr': '<i1', 'fortran_order': False, 'shape': (3,), }",
                               RandomBytes(3, 7)))
                  .ok());
}

TEST(NpyTest, RejectsBadMagicAndVersions) {
  EXPECT_THAT(ParseError(Bytes("")).message(), HasSubstr("not a .npy file"));
  EXPECT_THAT(ParseError(Bytes("\x93NUMP")).message(), HasSubstr("not a .npy file"));
  EXPECT_THAT(ParseError(Bytes("PK\x03\x04 a zip file")).message(), HasSubstr("not a .npy file"));
  EXPECT_THAT(ParseError(Bytes("\x93NUMPY\x01")).message(), HasSubstr("truncated"));
  std::vector<uint8_t> v4 = NpyFile(1, "{}", {});
  v4[6] = 4;
  EXPECT_THAT(ParseError(v4).message(), HasSubstr("unsupported npy format version 4.0"));
  v4[6] = 1;
  v4[7] = 1;
  EXPECT_THAT(ParseError(v4).message(), HasSubstr("version 1.1"));
  EXPECT_THAT(ParseError(Bytes("\x93NUMPY\x02\x00\x10\x00"sv)).message(),
              HasSubstr("truncated inside its header length"));
}

TEST(NpyTest, RejectsTruncatedHeader) {
  std::vector<uint8_t> file =
      NpyFile(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", {});
  file.resize(file.size() - 10);
  const absl::Status status = ParseError(file);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("truncated"));
}

TEST(NpyTest, RejectsTruncatedAndOverlongData) {
  const std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  absl::Status status = ParseError(NpyFile(1, header, RandomBytes(23, 8)));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("npy data is 23 bytes but shape (2, 3) of <f4 needs 24 (truncated file)"));
  status = ParseError(NpyFile(1, header, RandomBytes(25, 9)));
  EXPECT_THAT(status.message(), HasSubstr("npy data is 25 bytes"));
}

TEST(NpyTest, RejectsUnsupportedDtypesAndLayouts) {
  auto header_error = [](std::string_view descr, std::string_view fortran, std::string_view shape) {
    const std::string header =
        absl::StrCat("{'descr': ", std::string(descr), ", 'fortran_order': ", std::string(fortran),
                     ", 'shape': ", std::string(shape), ", }");
    return std::string(ParseError(NpyFile(1, header, RandomBytes(64, 10))).message());
  };
  EXPECT_THAT(header_error("'>f4'", "False", "(4,)"), HasSubstr("big-endian"));
  EXPECT_THAT(header_error("'<c8'", "False", "(4,)"), HasSubstr("unsupported dtype '<c8'"));
  EXPECT_THAT(header_error("'|b1'", "False", "(4,)"), HasSubstr("unsupported dtype '|b1'"));
  EXPECT_THAT(header_error("'|f4'", "False", "(4,)"), HasSubstr("unsupported dtype '|f4'"));
  EXPECT_THAT(header_error("'|O'", "False", "(4,)"), HasSubstr("unsupported dtype"));
  EXPECT_THAT(header_error("[('a', '<f4')]", "False", "(4,)"), HasSubstr("structured dtypes"));
  EXPECT_THAT(header_error("'<f4'", "True", "(4, 4)"), HasSubstr("fortran_order is True"));
  EXPECT_THAT(header_error("'<f4'", "1", "(4,)"), HasSubstr("must be True or False"));
  EXPECT_THAT(header_error("'<f4'", "False", "(-1, 4)"), HasSubstr("non-negative integers"));
  EXPECT_THAT(header_error("'<f4'", "False", "[4]"), HasSubstr("must be a tuple"));
  EXPECT_THAT(header_error("'<f4'", "False", "(99999999999999999999,)"),
              HasSubstr("does not fit in int64"));
  EXPECT_THAT(header_error("'<f8'", "False", "(4294967296, 4294967296)"), HasSubstr("overflows"));
}

TEST(NpyTest, RejectsMalformedHeaderDicts) {
  auto error = [](std::string_view header) {
    return std::string(ParseError(NpyFile(1, header, {})).message());
  };
  EXPECT_THAT(error("'descr': '<f4'"), HasSubstr("does not start with '{'"));
  EXPECT_THAT(error("{'descr': '<f4', 'fortran_order': False}"), HasSubstr("missing key 'shape'"));
  EXPECT_THAT(error("{'shape': (0,), 'fortran_order': False}"), HasSubstr("missing key 'descr'"));
  EXPECT_THAT(error("{'descr': '<f4', 'shape': (0,)}"), HasSubstr("missing key 'fortran_order'"));
  EXPECT_THAT(error("{'descr': '<f4', 'fortran_order': False, 'shape': (0,), 'x': 1}"),
              HasSubstr("unexpected key 'x'"));
  EXPECT_THAT(error("{'descr': '<f4', 'descr': '<f4'}"), HasSubstr("duplicate key 'descr'"));
  EXPECT_THAT(error("{'descr' '<f4'}"), HasSubstr("expected ':'"));
  EXPECT_THAT(error("{'descr': '<f4"), HasSubstr("unterminated string"));
  EXPECT_THAT(error("{'descr': '<f4' 'shape': (0,)}"), HasSubstr("expected ',' or '}'"));
  EXPECT_THAT(error("{'descr': '<f4', 'fortran_order': False, 'shape': (0,)} trailing"),
              HasSubstr("after the closing '}'"));
  EXPECT_THAT(error("{'descr': '<f4', 'fortran_order': False, 'shape': (1 2)}"),
              HasSubstr("expected ',' or ')'"));
}

TEST(NpyTest, SerializeRejectsBf16AndMismatchedData) {
  EXPECT_THAT(SerializeNpy({ElementType::kBF16, {2}, RandomBytes(4, 11)}).status().message(),
              HasSubstr("cannot hold bf16"));
  EXPECT_THAT(SerializeNpy({ElementType::kF32, {2}, RandomBytes(7, 12)}).status().message(),
              HasSubstr("array data is 7 bytes but shape (2,) of f32 needs 8"));
}

TEST(NpyTest, FileRoundTripAndErrorsNameThePath) {
  const std::string path = testing::TempDir() + "/npy_test_roundtrip." + std::to_string(getpid());
  NdArray a{ElementType::kF32, {4, 8}, RandomBytes(128, 13)};
  ASSERT_TRUE(WriteNpy(path, a).ok());
  absl::StatusOr<NdArray> back = ReadNpy(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->data, a.data);

  const std::string bad = testing::TempDir() + "/npy_test_bad." + std::to_string(getpid());
  ASSERT_TRUE(WriteFile(bad, Bytes("garbage")).ok());
  EXPECT_THAT(ReadNpy(bad).status().message(), HasSubstr(bad + ": not a .npy file"));
  EXPECT_EQ(ReadNpy(testing::TempDir() + "/npy_test_missing.npy").status().code(),
            absl::StatusCode::kNotFound);
  std::remove(path.c_str());
  std::remove(bad.c_str());
}

}  // namespace
}  // namespace qmm
