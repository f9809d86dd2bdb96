#include "client/safetensors.h"

#include <unistd.h>

#include <cstdio>
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

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

// A file with the given header text (length-prefixed) and `data_bytes` random data bytes.
std::vector<uint8_t> FileWithHeader(std::string_view json, size_t data_bytes) {
  std::vector<uint8_t> out;
  for (int i = 0; i < 8; ++i) out.push_back((json.size() >> (8 * i)) & 0xff);
  out.insert(out.end(), json.begin(), json.end());
  const std::vector<uint8_t> data = RandomBytes(data_bytes, 99);
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

class SafetensorsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const std::string& path : written_) std::remove(path.c_str());
  }

  std::string WriteTemp(const std::string& name, const std::vector<uint8_t>& bytes) {
    const std::string path =
        testing::TempDir() + "/safetensors_test_" + std::to_string(getpid()) + "_" + name;
    EXPECT_TRUE(WriteFile(path, bytes).ok());
    written_.push_back(path);
    return path;
  }

 private:
  std::vector<std::string> written_;
};

absl::Status HeaderError(std::string_view json, int64_t data_bytes) {
  return ParseSafetensorsHeader(json, data_bytes).status();
}

TEST_F(SafetensorsTest, RoundTripsEveryIssueDtype) {
  std::vector<std::pair<std::string, NdArray>> tensors = {
      {"w.f32", {ElementType::kF32, {3, 4}, RandomBytes(48, 1)}},
      {"w.f16", {ElementType::kF16, {5, 2}, RandomBytes(20, 2)}},
      {"w.bf16", {ElementType::kBF16, {7}, RandomBytes(14, 3)}},
      {"q.i8", {ElementType::kI8, {2, 2, 2}, RandomBytes(8, 4)}},
      {"q.u8", {ElementType::kU8, {9}, RandomBytes(9, 5)}},
      {"empty", {ElementType::kF32, {0, 3}, {}}},
  };
  absl::StatusOr<std::vector<uint8_t>> bytes = SerializeSafetensors(tensors);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) header_length = (header_length << 8) | (*bytes)[i];
  EXPECT_EQ(header_length % 8, 0u);

  const std::string path = WriteTemp("roundtrip.safetensors", *bytes);
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->header().tensors.size(), tensors.size());
  for (const auto& [name, a] : tensors) {
    absl::StatusOr<NdArray> back = file->Read(name);
    ASSERT_TRUE(back.ok()) << name << ": " << back.status();
    EXPECT_EQ(back->type, a.type) << name;
    EXPECT_EQ(back->shape, a.shape) << name;
    EXPECT_EQ(back->data, a.data) << name;
  }
  const absl::Status missing = file->Read("nope").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("no tensor 'nope'; the file has: empty, q.i8"));
}

TEST_F(SafetensorsTest, ReadsMetadataAndPaddedHeaders) {
  absl::StatusOr<SafetensorsHeader> header = ParseSafetensorsHeader(
      R"({"__metadata__": {"format": "pt"}, "a": {"dtype": "F32", "shape": [2],
          "data_offsets": [0, 8]}}      )",
      8);
  ASSERT_TRUE(header.ok()) << header.status();
  EXPECT_EQ(header->metadata.at("format"), "pt");
  ASSERT_EQ(header->tensors.size(), 1u);
  EXPECT_EQ(header->tensors[0].name, "a");
  EXPECT_EQ(header->tensors[0].end, 8);
}

TEST_F(SafetensorsTest, RejectsShortFilesAndBadHeaderLengths) {
  absl::Status status = SafetensorsFile::Open(WriteTemp("short", {1, 2, 3})).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("shorter than its 8-byte header"));

  // The header claims more bytes than the file has: a truncated header.
  std::vector<uint8_t> truncated = FileWithHeader(R"({"a": {"dtype": "F32"}})", 0);
  truncated.resize(truncated.size() - 5);
  status = SafetensorsFile::Open(WriteTemp("truncated_header", truncated)).status();
  EXPECT_THAT(status.message(), HasSubstr("passes the end of the file"));

  std::vector<uint8_t> huge = FileWithHeader("{}", 0);
  huge[5] = 0x01;  // 2^40 bytes
  status = SafetensorsFile::Open(WriteTemp("huge_header", huge)).status();
  EXPECT_THAT(status.message(), HasSubstr("exceeds the limit"));

  EXPECT_EQ(SafetensorsFile::Open(testing::TempDir() + "/no_such.safetensors").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(SafetensorsTest, RejectsBadJson) {
  EXPECT_THAT(HeaderError("{\"a\": ", 0).message(), HasSubstr("not valid JSON"));
  EXPECT_THAT(HeaderError("[1, 2]", 0).message(), HasSubstr("not a JSON object"));
  EXPECT_THAT(HeaderError(R"({"a": 3})", 0).message(), HasSubstr("'a': is not a JSON object"));
  EXPECT_THAT(HeaderError(R"({"__metadata__": []})", 0).message(),
              HasSubstr("'__metadata__' is not a JSON object"));
  EXPECT_THAT(HeaderError(R"({"__metadata__": {"x": 1}})", 0).message(),
              HasSubstr("value of 'x' is not a string"));
}

TEST_F(SafetensorsTest, RejectsBadEntries) {
  auto error = [](std::string_view entry, int64_t data_bytes) {
    return std::string(
        HeaderError(absl::StrCat(R"({"t": )", std::string(entry), "}"), data_bytes).message());
  };
  EXPECT_THAT(error(R"({"shape": [1], "data_offsets": [0, 4]})", 4),
              HasSubstr("tensor 't': missing string 'dtype'"));
  EXPECT_THAT(error(R"({"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]})", 1),
              HasSubstr("unsupported dtype 'F8_E4M3'"));
  EXPECT_THAT(error(R"({"dtype": "BOOL", "shape": [1], "data_offsets": [0, 1]})", 1),
              HasSubstr("unsupported dtype 'BOOL'"));
  EXPECT_THAT(error(R"({"dtype": "F32", "data_offsets": [0, 4]})", 4),
              HasSubstr("missing array 'shape'"));
  EXPECT_THAT(error(R"({"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]})", 4),
              HasSubstr("non-negative integers"));
  EXPECT_THAT(error(R"({"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]})", 4),
              HasSubstr("non-negative integers"));
  EXPECT_THAT(error(R"({"dtype": "F32", "shape": [1]})", 4), HasSubstr("missing 'data_offsets'"));
  EXPECT_THAT(error(R"({"dtype": "F32", "shape": [1], "data_offsets": [0]})", 4),
              HasSubstr("missing 'data_offsets'"));
  EXPECT_THAT(error(R"({"dtype": "F32", "shape": [1], "data_offsets": [0, "4"]})", 4),
              HasSubstr("must be non-negative integers"));
  EXPECT_THAT(error(R"({"dtype": "F32", "shape": [1], "data_offsets": [8, 4]})", 8),
              HasSubstr("end before they begin"));
  EXPECT_THAT(error(R"({"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})", 6),
              HasSubstr("pass the end of the data section (6 bytes"));
  EXPECT_THAT(error(R"({"dtype": "F32", "shape": [3], "data_offsets": [0, 8]})", 8),
              HasSubstr("span 8 bytes but its shape of F32 needs 12"));
  EXPECT_THAT(error(R"({"dtype": "F64", "shape": [4294967296, 4294967296],
                         "data_offsets": [0, 8]})",
                    8),
              HasSubstr("overflows"));
  EXPECT_THAT(
      error(R"({"dtype": "U8", "shape": [1], "data_offsets": [0, 18446744073709551615]})", 8),
      HasSubstr("must be non-negative integers"));
}

TEST_F(SafetensorsTest, RejectsOverlappingTensors) {
  const absl::Status status = HeaderError(
      R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
          "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}})",
      6);
  EXPECT_THAT(status.message(), HasSubstr("'a' and 'b' overlap"));
}

TEST_F(SafetensorsTest, RejectsOffsetsPastTheEndOfATruncatedFile) {
  std::vector<std::pair<std::string, NdArray>> tensors = {
      {"w", {ElementType::kF32, {4, 4}, RandomBytes(64, 6)}}};
  absl::StatusOr<std::vector<uint8_t>> bytes = SerializeSafetensors(tensors);
  ASSERT_TRUE(bytes.ok());
  bytes->resize(bytes->size() - 1);
  const absl::Status status =
      SafetensorsFile::Open(WriteTemp("truncated_data.safetensors", *bytes)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("tensor 'w': data_offsets [0, 64] pass the end"));
}

TEST_F(SafetensorsTest, SerializeRejectsBadInput) {
  EXPECT_THAT(
      SerializeSafetensors({{"a", {ElementType::kF32, {2}, RandomBytes(4, 7)}}}).status().message(),
      HasSubstr("has 4 bytes of data but its shape needs 8"));
  NdArray one{ElementType::kU8, {1}, {1}};
  EXPECT_THAT(SerializeSafetensors({{"a", one}, {"a", one}}).status().message(),
              HasSubstr("'a' is taken"));
  EXPECT_THAT(SerializeSafetensors({{"__metadata__", one}}).status().message(),
              HasSubstr("is taken"));
}

}  // namespace
}  // namespace qmm
