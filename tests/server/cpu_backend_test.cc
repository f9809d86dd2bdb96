#include "server/cpu_backend.h"

#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "kernels/cpu/chain.h"
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

TEST(CpuBackendTest, ReportsItsConversionsAsTransfers) {
  std::unique_ptr<Backend> backend = Make(2);
  const WeightShape shape{16, 256, 128};
  std::vector<uint8_t> packed =
      PackLocally(Scheme::kW4A16, shape, DType::kF32, RandomFloats(16 * 256, 1));
  absl::StatusOr<PackedWeight> view = ViewPacked(Scheme::kW4A16, shape, packed);
  auto weight = backend->Load(*view);
  ASSERT_TRUE(weight.ok());
  // No staging of its own: callers gather into their own memory. Nor registration: it
  // reads host memory anyway, so MatMulBlocks has nothing to run on.
  absl::StatusOr<HostStaging> staging = backend->StageHost(0, 1024, 1024);
  ASSERT_TRUE(staging.ok());
  EXPECT_EQ(staging->x, nullptr);
  EXPECT_EQ(staging->y, nullptr);
  std::string memory(4096, '\0');
  absl::StatusOr<std::unique_ptr<HostRegistration>> registration =
      backend->RegisterHost(memory.data(), memory.size());
  ASSERT_TRUE(registration.ok());
  EXPECT_EQ(*registration, nullptr);
  const RowBlock block{memory.data(), memory.data() + 1024, 1};
  const absl::Status blocks =
      backend->MatMulBlocks(0, {.weight = weight->get(), .blocks = {&block, 1}}).status();
  EXPECT_EQ(blocks.code(), absl::StatusCode::kUnimplemented) << blocks;
  EXPECT_NE(blocks.message().find("registered host memory"), absl::string_view::npos);
  for (DType dtype : {DType::kF16, DType::kF32}) {
    const std::string x = ToBytes(dtype, RandomFloats(4 * 256, 2));
    std::string y(4 * 16 * DTypeSize(dtype), '\xff');
    TransferTimes transfer;
    MatMulCall call{weight->get(), dtype, x.data(), 4, dtype, y.data(), &transfer};
    ASSERT_TRUE(backend->MatMul(1, call).ok());
    EXPECT_GE(transfer.h2d_ns, 0);
    EXPECT_GE(transfer.d2h_ns, 0);
    ExpectMatchesReference(*view, FromBytes(dtype, x), 4, FromBytes(dtype, y), dtype);
  }
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

// A DyT -> SwiGLU -> residual -> GELU -> Linear(bias) model on the CPU backend, and the
// same layers run straight through CpuRunChain.
class CpuBackendForwardTest : public ::testing::Test {
 protected:
  const BackendWeight* Load(Scheme scheme, WeightShape shape, uint32_t seed) {
    packed_.push_back(
        PackLocally(scheme, shape, DType::kF32, RandomFloats(shape.n * shape.k, seed)));
    absl::StatusOr<PackedWeight> view = ViewPacked(scheme, shape, packed_.back());
    EXPECT_TRUE(view.ok()) << view.status();
    absl::StatusOr<std::unique_ptr<BackendWeight>> w = backend_->Load(*view);
    EXPECT_TRUE(w.ok()) << w.status();
    weights_.push_back(*std::move(w));
    views_.push_back(*view);
    return weights_.back().get();
  }

  void SetUp() override {
    gamma_ = RandomFloats(128, 10);
    beta_ = RandomFloats(128, 11);
    bias_ = RandomFloats(24, 12);
    const BackendWeight* gate = Load(Scheme::kW4A16, {256, 128, 0}, 1);
    const BackendWeight* up = Load(Scheme::kW8A16, {256, 128, 0}, 2);
    const BackendWeight* down = Load(Scheme::kW2A8, {128, 256, 0}, 3);
    const BackendWeight* head = Load(Scheme::kBf16, {24, 128, 0}, 4);
    layers_ = {
        {.kind = LayerKind::kDyT,
         .alpha = 0.7f,
         .gamma = gamma_,
         .beta = beta_,
         .in_features = 128,
         .out_features = 128},
        {.kind = LayerKind::kGatedMlp,
         .weights = {gate, up, down},
         .in_features = 128,
         .out_features = 128},
        {.kind = LayerKind::kResidual, .block_start = 0, .in_features = 128, .out_features = 128},
        {.kind = LayerKind::kActivation,
         .activation = Activation::kGeluTanh,
         .in_features = 128,
         .out_features = 128},
        {.kind = LayerKind::kLinear,
         .weights = {head},
         .bias = bias_,
         .in_features = 128,
         .out_features = 24},
    };
  }

  // The same chain with the views the CPU kernels read.
  std::vector<CpuChainLayer> Direct() const {
    return {
        {.kind = LayerKind::kDyT,
         .alpha = 0.7f,
         .gamma = gamma_.data(),
         .beta = beta_.data(),
         .in_features = 128,
         .out_features = 128},
        {.kind = LayerKind::kGatedMlp,
         .weights = {&views_[0], &views_[1], &views_[2]},
         .in_features = 128,
         .out_features = 128},
        {.kind = LayerKind::kResidual, .block_start = 0, .in_features = 128, .out_features = 128},
        {.kind = LayerKind::kActivation,
         .activation = Activation::kGeluTanh,
         .in_features = 128,
         .out_features = 128},
        {.kind = LayerKind::kLinear,
         .weights = {&views_[3]},
         .bias = bias_.data(),
         .in_features = 128,
         .out_features = 24},
    };
  }

  std::unique_ptr<Backend> backend_ = Make();
  std::deque<std::vector<uint8_t>> packed_;
  std::deque<PackedWeight> views_;
  std::vector<std::unique_ptr<BackendWeight>> weights_;
  std::vector<float> gamma_, beta_, bias_;
  std::vector<ModelLayer> layers_;
};

TEST_F(CpuBackendForwardTest, EqualsTheChainRunForEveryDType) {
  absl::StatusOr<std::unique_ptr<BackendModel>> model = backend_->LoadModel(layers_);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->device_bytes(), (128 + 128 + 24) * 4);
  // The model keeps its own parameters: the caller's may change once it is loaded.
  const std::vector<float> gamma = gamma_;
  std::fill(gamma_.begin(), gamma_.end(), 0.0f);

  const int64_t m = 5;
  const std::vector<float> x = RandomFloats(m * 128, 20);
  for (DType x_dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (DType y_dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      const std::string x_bytes = ToBytes(x_dtype, x);
      std::string y_bytes(m * 24 * DTypeSize(y_dtype), '\xff');
      ForwardCall call{.model = model->get(),
                       .x_dtype = x_dtype,
                       .x = x_bytes.data(),
                       .m = m,
                       .y_dtype = y_dtype,
                       .y = y_bytes.data()};
      absl::StatusOr<int64_t> ns = backend_->Forward(1, call);
      ASSERT_TRUE(ns.ok()) << ns.status();
      EXPECT_GT(*ns, 0);
      gamma_ = gamma;  // for Direct()
      const std::vector<float> wire = FromBytes(x_dtype, x_bytes);
      std::vector<float> want(m * 24);
      CpuRunChain(Direct(), nullptr, wire.data(), m, want.data(), 0);
      EXPECT_EQ(FromBytes(y_dtype, y_bytes), FromBytes(y_dtype, ToBytes(y_dtype, want)))
          << DTypeName(x_dtype) << " -> " << DTypeName(y_dtype);
    }
  }
}

TEST_F(CpuBackendForwardTest, TokenInputAndWorkerRange) {
  const BackendWeight* table = Load(Scheme::kFp16, {30, 128, 0}, 7);
  std::vector<ModelLayer> layers = {
      {.kind = LayerKind::kEmbedding, .weights = {table}, .out_features = 128}};
  layers.insert(layers.end(), layers_.begin(), layers_.end());
  layers[3].block_start = 1;  // the residual's block now starts at the DyT, layer 1
  absl::StatusOr<std::unique_ptr<BackendModel>> model = backend_->LoadModel(layers);
  ASSERT_TRUE(model.ok()) << model.status();
  const std::vector<int32_t> ids = {29, 0, 3};
  std::vector<float> y(3 * 24, -1.0f);
  ForwardCall call{.model = model->get(), .token_ids = ids.data(), .m = 3, .y = y.data()};
  ASSERT_TRUE(backend_->Forward(0, call).ok());

  std::vector<CpuChainLayer> direct = Direct();
  direct.insert(direct.begin(), CpuChainLayer{.kind = LayerKind::kEmbedding,
                                              .weights = {&views_.back()},
                                              .out_features = 128});
  direct[3].block_start = 1;
  std::vector<float> want(3 * 24);
  CpuRunChain(direct, ids.data(), nullptr, 3, want.data(), 0);
  EXPECT_EQ(y, want);

  EXPECT_EQ(backend_->Forward(2, call).status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(backend_->Forward(-1, call).status().code(), absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace qmm
