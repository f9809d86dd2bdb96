#include "server/upload_assembler.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/strings/string_view.h"
#include "server/limits.h"

namespace qmm {
namespace {

Sha256::Digest DigestOf(absl::string_view data) {
  Sha256 sha;
  sha.Update(data);
  return sha.Finish();
}

std::string Payload(size_t size) {
  std::string out(size, '\0');
  for (size_t i = 0; i < size; ++i) out[i] = static_cast<char>((i * 131) ^ (i >> 7));
  return out;
}

TEST(UploadAssemblerTest, ReassemblesChunksInOrder) {
  const std::string payload = Payload(10000);
  UploadAssembler assembler(payload.size(), DigestOf(payload));
  for (size_t offset = 0; offset < payload.size(); offset += 3000) {
    ASSERT_TRUE(assembler.AddChunk(absl::string_view(payload).substr(offset, 3000)).ok());
  }
  EXPECT_EQ(assembler.received_bytes(), 10000);
  absl::StatusOr<std::vector<uint8_t>> out = assembler.Finish();
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(std::string(out->begin(), out->end()), payload);
}

TEST(UploadAssemblerTest, EmptyChunksAreHarmless) {
  const std::string payload = Payload(10);
  UploadAssembler assembler(payload.size(), DigestOf(payload));
  ASSERT_TRUE(assembler.AddChunk("").ok());
  ASSERT_TRUE(assembler.AddChunk(payload).ok());
  ASSERT_TRUE(assembler.AddChunk("").ok());
  EXPECT_TRUE(assembler.Finish().ok());
}

TEST(UploadAssemblerTest, ChunkPastTheTotalIsInvalidArgument) {
  const std::string payload = Payload(100);
  UploadAssembler assembler(payload.size(), DigestOf(payload));
  ASSERT_TRUE(assembler.AddChunk(absl::string_view(payload).substr(0, 60)).ok());
  const absl::Status status = assembler.AddChunk(absl::string_view(payload).substr(0, 41));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("41 bytes after 60"), absl::string_view::npos) << status;
  EXPECT_NE(status.message().find("total_bytes = 100"), absl::string_view::npos) << status;
}

TEST(UploadAssemblerTest, OversizedChunkIsInvalidArgument) {
  const std::string payload = Payload(kMaxChunkBytes + 1);
  UploadAssembler assembler(payload.size(), DigestOf(payload));
  const absl::Status status = assembler.AddChunk(payload);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("1048577"), absl::string_view::npos) << status;
  EXPECT_NE(status.message().find("1048576"), absl::string_view::npos) << status;
}

TEST(UploadAssemblerTest, ShortPayloadNamesReceivedAndDeclared) {
  const std::string payload = Payload(100);
  UploadAssembler assembler(payload.size(), DigestOf(payload));
  ASSERT_TRUE(assembler.AddChunk(absl::string_view(payload).substr(0, 99)).ok());
  const absl::Status status = assembler.Finish().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("after 99 of 100 declared bytes"), absl::string_view::npos)
      << status;
}

TEST(UploadAssemblerTest, DigestMismatchIsDataLoss) {
  std::string payload = Payload(100);
  const Sha256::Digest digest = DigestOf(payload);
  payload[37] ^= 1;  // one flipped bit in transit
  UploadAssembler assembler(payload.size(), digest);
  ASSERT_TRUE(assembler.AddChunk(payload).ok());
  const absl::Status status = assembler.Finish().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(status.message().find("SHA-256"), absl::string_view::npos) << status;
}

}  // namespace
}  // namespace qmm
