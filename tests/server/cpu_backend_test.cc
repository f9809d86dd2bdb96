#include "server/cpu_backend.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernels/format.h"
#include "tests/server/server_test_util.h"

namespace qmm {
namespace {

using testing::ExpectMatchesReference;
using testing::FromBytes;
using testing::PackLocally;
using testing::RandomFloats;
using testing::ToBytes;

std::unique_ptr<Backend> Make(int workers = 2) {
  BackendOptions options;
  options.kind = BackendOptions::Kind::kCpu;
  options.num_workers = workers;
  return CreateCpuBackend(options);
}

TEST(CpuBackendTest, DescribesItself) {
  std::unique_ptr<Backend> backend = Make(3);
  EXPECT_EQ(backend->name(), "cpu");
  EXPECT_FALSE(backend->device_name().empty());
  EXPECT_EQ(backend->num_workers(), 3);
  EXPECT_GT(backend->memory_total_bytes(), int64_t{1} << 26);
  EXPECT_GT(backend->memory_free_bytes(), 0);
  EXPECT_LE(backend->memory_free_bytes(), backend->memory_total_bytes());
  EXPECT_TRUE(backend->healthy());
  EXPECT_TRUE(backend->CheckShape(Scheme::kW2A8, WeightShape{3, 128, 0}).ok());
}

TEST(CpuBackendTest, LoadKeepsAPrivateCopyOfThePackedForm) {
  std::unique_ptr<Backend> backend = Make();
  const WeightShape shape{5, 64, 0};
  std::vector<uint8_t> packed =
      PackLocally(Scheme::kW8A16, shape, DType::kF32, RandomFloats(5 * 64, 1));
  absl::StatusOr<PackedWeight> view = ViewPacked(Scheme::kW8A16, shape, packed);
  ASSERT_TRUE(view.ok());
  absl::StatusOr<std::unique_ptr<BackendWeight>> weight = backend->Load(*view);
  ASSERT_TRUE(weight.ok());
  EXPECT_EQ((*weight)->scheme(), Scheme::kW8A16);
  EXPECT_EQ((*weight)->shape().n, 5);
  EXPECT_EQ((*weight)->device_bytes(), PackedBytes(Scheme::kW8A16, shape));

  // Overwriting the caller's buffer afterwards must not change the results.
  const std::vector<float> x = RandomFloats(2 * 64, 2);
  std::vector<float> before(2 * 5), after(2 * 5);
  MatMulCall call{weight->get(), DType::kF32, x.data(), 2, DType::kF32, before.data()};
  ASSERT_TRUE(backend->MatMul(0, call).ok());
  std::vector<uint8_t> original = packed;
  std::fill(packed.begin(), packed.end(), 0x11);
  call.y = after.data();
  ASSERT_TRUE(backend->MatMul(1, call).ok());
  EXPECT_EQ(before, after);
  ExpectMatchesReference(*ViewPacked(Scheme::kW8A16, shape, original), x, 2, after, DType::kF32);
}

TEST(CpuBackendTest, WorkerOutOfRangeIsInternal) {
  std::unique_ptr<Backend> backend = Make(2);
  const WeightShape shape{2, 8, 0};
  std::vector<uint8_t> packed = PackLocally(Scheme::kFp16, shape, DType::kF32, RandomFloats(16, 1));
  auto weight = backend->Load(*ViewPacked(Scheme::kFp16, shape, packed));
  ASSERT_TRUE(weight.ok());
  std::vector<float> x = RandomFloats(8, 2), y(2);
  MatMulCall call{weight->get(), DType::kF32, x.data(), 1, DType::kF32, y.data()};
  EXPECT_EQ(backend->MatMul(2, call).status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(backend->MatMul(-1, call).status().code(), absl::StatusCode::kInternal);
}

// Every scheme and every input/output dtype, with the output poisoned beforehand so that
// an unwritten element shows up.
TEST(CpuBackendTest, EverySchemeAndDtypeMatchesTheReference) {
  std::unique_ptr<Backend> backend = Make();
  const DType dtypes[] = {DType::kF32, DType::kF16, DType::kBF16};
  uint32_t seed = 100;
  for (Scheme scheme : kAllSchemes) {
    for (int32_t group : {0, 128}) {
      if (group != 0 && scheme != Scheme::kW4A16) continue;
      const WeightShape shape{37, 384, group};
      std::vector<uint8_t> packed =
          PackLocally(scheme, shape, DType::kF32, RandomFloats(shape.n * shape.k, seed++));
      absl::StatusOr<PackedWeight> view = ViewPacked(scheme, shape, packed);
      ASSERT_TRUE(view.ok()) << view.status();
      auto weight = backend->Load(*view);
      ASSERT_TRUE(weight.ok());
      for (DType x_dtype : dtypes) {
        for (DType y_dtype : dtypes) {
          const int64_t m = 3;
          const std::string x_bytes = ToBytes(x_dtype, RandomFloats(m * shape.k, seed++));
          std::string y_bytes(m * shape.n * DTypeSize(y_dtype), '\xff');  // NaN in every dtype
          MatMulCall call{weight->get(), x_dtype, x_bytes.data(), m, y_dtype, y_bytes.data()};
          absl::StatusOr<int64_t> ns = backend->MatMul(1, call);
          ASSERT_TRUE(ns.ok()) << ns.status();
          EXPECT_GT(*ns, 0);
          SCOPED_TRACE(std::string(SchemeName(scheme)) + " group " + std::to_string(group) + " " +
                       std::string(DTypeName(x_dtype)) + " -> " + std::string(DTypeName(y_dtype)));
          ExpectMatchesReference(*view, FromBytes(x_dtype, x_bytes), m, FromBytes(y_dtype, y_bytes),
                                 y_dtype);
        }
      }
    }
  }
}

}  // namespace
}  // namespace qmm
