#include "client/upload_request.h"

#include <random>
#include <vector>

#include "client/sha256.h"
#include "gtest/gtest.h"

namespace qmm::client_internal {
namespace {

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

TEST(SplitIntoChunksTest, CoversThePayloadInOrderWithBoundedChunks) {
  for (size_t size : {size_t{0}, size_t{1}, kMaxChunkBytes - 1, kMaxChunkBytes, kMaxChunkBytes + 1,
                      3 * kMaxChunkBytes + 12345}) {
    const std::vector<uint8_t> payload = RandomBytes(size, static_cast<uint32_t>(size));
    const std::vector<std::span<const uint8_t>> chunks = SplitIntoChunks(payload, kMaxChunkBytes);
    EXPECT_EQ(chunks.size(), (size + kMaxChunkBytes - 1) / kMaxChunkBytes) << size;
    std::vector<uint8_t> joined;
    for (size_t i = 0; i < chunks.size(); ++i) {
      EXPECT_GT(chunks[i].size(), 0u);
      EXPECT_LE(chunks[i].size(), kMaxChunkBytes);
      // Every chunk but the last is full: no needless small messages.
      if (i + 1 < chunks.size()) {
        EXPECT_EQ(chunks[i].size(), kMaxChunkBytes);
      }
      joined.insert(joined.end(), chunks[i].begin(), chunks[i].end());
    }
    EXPECT_EQ(joined, payload) << size;
  }
}

TEST(SplitIntoChunksTest, SmallChunkSizes) {
  const std::vector<uint8_t> payload = RandomBytes(10, 1);
  const auto chunks = SplitIntoChunks(payload, 3);
  ASSERT_EQ(chunks.size(), 4u);
  EXPECT_EQ(chunks[3].size(), 1u);
  EXPECT_EQ(chunks[3].data(), payload.data() + 9);
}

TEST(BuildUploadHeaderTest, FloatPayload) {
  const std::vector<uint8_t> payload = RandomBytes(256 * 128 * 2, 2);
  UploadSpec spec;
  spec.name = "layers.0/attn.q:v1";
  spec.scheme = Scheme::kW4A16;
  spec.shape = {256, 128, 128};
  spec.encoding = UploadSpec::Encoding::kFloat;
  spec.source_dtype = DType::kBF16;
  const v1::WeightHeader header = BuildUploadHeader(spec, payload);
  EXPECT_EQ(header.name(), spec.name);
  EXPECT_EQ(header.n(), 256);
  EXPECT_EQ(header.k(), 128);
  EXPECT_EQ(header.scheme(), v1::SCHEME_W4A16);
  EXPECT_EQ(header.group_size(), 128);
  EXPECT_EQ(header.encoding(), v1::SOURCE_ENCODING_FLOAT);
  EXPECT_EQ(header.source_dtype(), v1::DTYPE_BF16);
  EXPECT_EQ(header.total_bytes(), static_cast<int64_t>(payload.size()));
  const std::array<uint8_t, 32> digest = Sha256Digest(payload);
  EXPECT_EQ(header.sha256(), std::string(digest.begin(), digest.end()));
}

TEST(BuildUploadHeaderTest, PackedPayloadLeavesTheSourceDtypeUnset) {
  const std::vector<uint8_t> payload = RandomBytes(64 * 128 / 4 + 4 * 64, 3);
  UploadSpec spec;
  spec.name = "t";
  spec.scheme = Scheme::kW2A8;
  spec.shape = {64, 128, 0};
  spec.encoding = UploadSpec::Encoding::kPacked;
  spec.source_dtype = DType::kF16;  // ignored for packed payloads
  const v1::WeightHeader header = BuildUploadHeader(spec, payload);
  EXPECT_EQ(header.scheme(), v1::SCHEME_W2A8);
  EXPECT_EQ(header.encoding(), v1::SOURCE_ENCODING_PACKED);
  EXPECT_EQ(header.source_dtype(), v1::DTYPE_UNSPECIFIED);
  EXPECT_EQ(header.group_size(), 0);
  EXPECT_EQ(header.sha256().size(), 32u);
}

TEST(BuildUploadHeaderTest, Int4CheckpointsCarryTheirScalesDtype) {
  const std::vector<uint8_t> payload = RandomBytes(100, 4);  // the server checks the size
  const std::pair<UploadSpec::Encoding, v1::SourceEncoding> cases[] = {
      {UploadSpec::Encoding::kGptq, v1::SOURCE_ENCODING_GPTQ},
      {UploadSpec::Encoding::kGptqV2, v1::SOURCE_ENCODING_GPTQ_V2},
      {UploadSpec::Encoding::kPackQuantized, v1::SOURCE_ENCODING_PACK_QUANTIZED}};
  for (const auto& [encoding, wire] : cases) {
    UploadSpec spec;
    spec.name = "c";
    spec.scheme = Scheme::kW4A16;
    spec.shape = {64, 256, 0};
    spec.encoding = encoding;
    spec.source_dtype = DType::kBF16;
    const v1::WeightHeader header = BuildUploadHeader(spec, payload);
    EXPECT_EQ(header.encoding(), wire);
    EXPECT_EQ(header.source_dtype(), v1::DTYPE_BF16);
    EXPECT_EQ(header.scheme(), v1::SCHEME_W4A16);
    EXPECT_EQ(header.group_size(), 0);
    EXPECT_EQ(header.total_bytes(), 100);
    EXPECT_FALSE(header.scale_multiplies());
  }
}

TEST(BuildUploadHeaderTest, BitnetScalesThatMultiply) {
  const std::vector<uint8_t> payload = RandomBytes(66, 5);
  UploadSpec spec;
  spec.name = "b";
  spec.scheme = Scheme::kW2A8;
  spec.shape = {4, 128, 0};
  spec.encoding = UploadSpec::Encoding::kBitnetHf;
  spec.source_dtype = DType::kBF16;
  EXPECT_FALSE(BuildUploadHeader(spec, payload).scale_multiplies());
  spec.scale_multiplies = true;
  const v1::WeightHeader header = BuildUploadHeader(spec, payload);
  EXPECT_TRUE(header.scale_multiplies());
  EXPECT_EQ(header.encoding(), v1::SOURCE_ENCODING_BITNET_HF);
  EXPECT_EQ(header.source_dtype(), v1::DTYPE_BF16);
}

}  // namespace
}  // namespace qmm::client_internal
