#include "server/validation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "server/cpu_backend.h"
#include "server/proto_convert.h"
#include "tests/server/server_test_util.h"

namespace qmm {
namespace {

using ::qmm::testing::ToBytes;

std::unique_ptr<Backend> Cpu() { return CreateCpuBackend(BackendOptions{}); }

// A header whose declared sizes are consistent; tests break one field at a time.
v1::WeightHeader GoodHeader() {
  v1::WeightHeader h;
  h.set_name("model.layers.0/mlp:up_proj-v2");
  h.set_n(16);
  h.set_k(256);
  h.set_scheme(v1::SCHEME_W4A16);
  h.set_group_size(128);
  h.set_encoding(v1::SOURCE_ENCODING_FLOAT);
  h.set_source_dtype(v1::DTYPE_BF16);
  h.set_total_bytes(16 * 256 * 2);
  h.set_sha256(std::string(32, 'x'));
  return h;
}

void ExpectInvalid(const v1::WeightHeader& h, absl::string_view needle,
                   absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
  std::unique_ptr<Backend> backend = Cpu();
  const absl::Status status = CheckWeightHeader(h, *backend, ServiceLimits{}).status();
  EXPECT_EQ(status.code(), code) << status;
  EXPECT_NE(status.message().find(needle), absl::string_view::npos)
      << "message: " << status.message() << "\nwanted: " << needle;
}

TEST(CheckWeightNameTest, AcceptsTheDocumentedCharset) {
  EXPECT_TRUE(CheckWeightName("aZ09._:/-", "name").ok());
  EXPECT_TRUE(CheckWeightName(std::string(kMaxNameLength, 'a'), "name").ok());
}

TEST(CheckWeightNameTest, RejectsEmptyLongAndOddNames) {
  EXPECT_EQ(CheckWeightName("", "name").code(), absl::StatusCode::kInvalidArgument);
  const absl::Status long_name = CheckWeightName(std::string(kMaxNameLength + 1, 'a'), "name");
  EXPECT_EQ(long_name.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(long_name.message().find("129 characters"), absl::string_view::npos);
  for (const std::string& bad :
       std::vector<std::string>{"a b", "a\nb", "ä", "a\\b", "a*", std::string("a\0b", 3)}) {
    const absl::Status status = CheckWeightName(bad, "header.name");
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(status.message().find("header.name has a character outside"),
              absl::string_view::npos);
  }
}

TEST(CheckWeightHeaderTest, AcceptsAConsistentHeader) {
  std::unique_ptr<Backend> backend = Cpu();
  absl::StatusOr<UploadSpec> spec = CheckWeightHeader(GoodHeader(), *backend, ServiceLimits{});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name, "model.layers.0/mlp:up_proj-v2");
  EXPECT_EQ(spec->desc.scheme, Scheme::kW4A16);
  EXPECT_EQ(spec->desc.shape.n, 16);
  EXPECT_EQ(spec->desc.shape.k, 256);
  EXPECT_EQ(spec->desc.shape.group_size, 128);
  EXPECT_EQ(spec->desc.packed_bytes, 16 * 128 + 2 * 16 * 2);
  EXPECT_EQ(spec->source_dtype, DType::kBF16);
  EXPECT_EQ(spec->total_bytes, 16 * 256 * 2);
}

TEST(CheckWeightHeaderTest, PackedTotalIsThePackedSize) {
  v1::WeightHeader h = GoodHeader();
  h.set_encoding(v1::SOURCE_ENCODING_PACKED);
  h.clear_source_dtype();
  h.set_total_bytes(16 * 128 + 2 * 16 * 2);
  std::unique_ptr<Backend> backend = Cpu();
  absl::StatusOr<UploadSpec> spec = CheckWeightHeader(h, *backend, ServiceLimits{});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->source_dtype.has_value());
}

// A W2A8 header for a BitNet planar payload of 8 x 128 with `scales` fp16 scales.
v1::WeightHeader BitnetHeader(v1::SourceEncoding encoding, int64_t scales) {
  v1::WeightHeader h = GoodHeader();
  h.set_scheme(v1::SCHEME_W2A8);
  h.set_n(8);
  h.set_k(128);
  h.set_group_size(0);
  h.set_encoding(encoding);
  h.set_source_dtype(v1::DTYPE_FP16);
  h.set_total_bytes(8 * 128 / 4 + 2 * scales);
  return h;
}

TEST(CheckWeightHeaderTest, BitnetPayloadsCarryZeroOneOrNScales) {
  std::unique_ptr<Backend> backend = Cpu();
  for (v1::SourceEncoding encoding :
       {v1::SOURCE_ENCODING_BITNET_HF, v1::SOURCE_ENCODING_BITNET_LIGER}) {
    for (int64_t scales : {0, 1, 8}) {
      absl::StatusOr<UploadSpec> spec =
          CheckWeightHeader(BitnetHeader(encoding, scales), *backend, ServiceLimits{});
      ASSERT_TRUE(spec.ok()) << spec.status();
      ASSERT_TRUE(spec->bitnet.has_value());
      EXPECT_EQ(spec->bitnet->axis, encoding == v1::SOURCE_ENCODING_BITNET_HF
                                        ? BitnetPackedAxis::kOutFeatures
                                        : BitnetPackedAxis::kInFeatures);
      EXPECT_EQ(spec->bitnet->scale_dtype, DType::kF16);
      EXPECT_EQ(spec->bitnet->scale_use, BitnetScale::kDivides);
      EXPECT_FALSE(spec->source_dtype.has_value());
      EXPECT_EQ(spec->total_bytes, 256 + 2 * scales);
    }
    v1::WeightHeader multiplies = BitnetHeader(encoding, 1);
    multiplies.set_scale_multiplies(true);
    absl::StatusOr<UploadSpec> multiplied =
        CheckWeightHeader(multiplies, *backend, ServiceLimits{});
    ASSERT_TRUE(multiplied.ok()) << multiplied.status();
    EXPECT_EQ(multiplied->bitnet->scale_use, BitnetScale::kMultiplies);
    v1::WeightHeader odd = BitnetHeader(encoding, 3);
    absl::StatusOr<UploadSpec> spec = CheckWeightHeader(odd, *backend, ServiceLimits{});
    ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(spec.status().message().find("256, 258 or 272 bytes"), absl::string_view::npos)
        << spec.status();
    v1::WeightHeader wrong_scheme = BitnetHeader(encoding, 0);
    wrong_scheme.set_scheme(v1::SCHEME_W8A16);
    spec = CheckWeightHeader(wrong_scheme, *backend, ServiceLimits{});
    ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(spec.status().message().find("needs header.scheme = SCHEME_W2A8"),
              absl::string_view::npos)
        << spec.status();
  }
}

// A W4A16 header for an int4 checkpoint payload of 16 x 256 (groups of 128), scales
// of `scale_dtype`, `total_bytes` long.
v1::WeightHeader Int4CheckpointHeader(v1::SourceEncoding encoding, v1::DType scale_dtype,
                                      int64_t total_bytes) {
  v1::WeightHeader h = GoodHeader();
  h.set_encoding(encoding);
  h.set_source_dtype(scale_dtype);
  h.set_total_bytes(total_bytes);
  return h;
}

TEST(CheckWeightHeaderTest, Int4CheckpointPayloadsWithOrWithoutTheGroupIndex) {
  std::unique_ptr<Backend> backend = Cpu();
  // 16 x 256 in groups of 128: codes 2048 bytes, GPTQ's qzeros 16, 32 scales, g_idx 1024.
  const struct {
    v1::SourceEncoding encoding;
    Int4Checkpoint format;
    int64_t zeros;
    int64_t g_idx;  // the group index's bytes, 0 where the format has none
  } cases[] = {{v1::SOURCE_ENCODING_GPTQ, Int4Checkpoint::kGptq, 16, 1024},
               {v1::SOURCE_ENCODING_GPTQ_V2, Int4Checkpoint::kGptqV2, 16, 1024},
               {v1::SOURCE_ENCODING_PACK_QUANTIZED, Int4Checkpoint::kPackQuantized, 0, 1024},
               {v1::SOURCE_ENCODING_AWQ, Int4Checkpoint::kAwq, 16, 0}};
  for (const auto& c : cases) {
    SCOPED_TRACE(v1::SourceEncoding_Name(c.encoding));
    for (int64_t g_idx : {int64_t{0}, c.g_idx}) {
      // Scales default to fp16; bf16 and fp32 ones are taken too.
      for (auto [dtype, size] :
           {std::pair{v1::DTYPE_UNSPECIFIED, 2}, {v1::DTYPE_BF16, 2}, {v1::DTYPE_FP32, 4}}) {
        const int64_t total = 2048 + c.zeros + 32 * size + g_idx;
        absl::StatusOr<UploadSpec> spec = CheckWeightHeader(
            Int4CheckpointHeader(c.encoding, dtype, total), *backend, ServiceLimits{});
        ASSERT_TRUE(spec.ok()) << spec.status();
        ASSERT_TRUE(spec->int4_checkpoint.has_value());
        EXPECT_EQ(spec->int4_checkpoint->format, c.format);
        EXPECT_EQ(spec->int4_checkpoint->scale_dtype, dtype == v1::DTYPE_FP32   ? DType::kF32
                                                      : dtype == v1::DTYPE_BF16 ? DType::kBF16
                                                                                : DType::kF16);
        EXPECT_FALSE(spec->source_dtype.has_value());
        EXPECT_FALSE(spec->bitnet.has_value());
        EXPECT_EQ(spec->total_bytes, total);
      }
    }
    absl::StatusOr<UploadSpec> spec = CheckWeightHeader(
        Int4CheckpointHeader(c.encoding, v1::DTYPE_FP16, 2048), *backend, ServiceLimits{});
    ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(
        spec.status().message().find(absl::StrCat(
            "header.total_bytes = 2048 but a ", v1::SourceEncoding_Name(c.encoding),
            " payload for n = 16, k = 256, group_size 128 with fp16 scales is ",
            2048 + c.zeros + 64, " bytes",
            c.g_idx > 0 ? absl::StrCat(", or ", 2048 + c.zeros + 64 + 1024, " with the group index")
                        : std::string())),
        absl::string_view::npos)
        << spec.status();

    v1::WeightHeader wrong_scheme = Int4CheckpointHeader(c.encoding, v1::DTYPE_FP16, 2048);
    wrong_scheme.set_scheme(v1::SCHEME_W8A16);
    wrong_scheme.set_group_size(0);
    spec = CheckWeightHeader(wrong_scheme, *backend, ServiceLimits{});
    ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(spec.status().message().find("needs header.scheme = SCHEME_W4A16, not SCHEME_W8A16"),
              absl::string_view::npos)
        << spec.status();

    v1::WeightHeader bad_dtype = Int4CheckpointHeader(c.encoding, static_cast<v1::DType>(9), 2048);
    spec = CheckWeightHeader(bad_dtype, *backend, ServiceLimits{});
    ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(spec.status().message().find("header.source_dtype = 9 is not a supported dtype"),
              absl::string_view::npos)
        << spec.status();
  }
  // With zero points the packed form holds them too (16 x 2 int8).
  v1::WeightHeader awq =
      Int4CheckpointHeader(v1::SOURCE_ENCODING_AWQ, v1::DTYPE_FP16, 2048 + 16 + 64);
  awq.set_zero_points(true);
  absl::StatusOr<UploadSpec> zp = CheckWeightHeader(awq, *backend, ServiceLimits{});
  ASSERT_TRUE(zp.ok()) << zp.status();
  EXPECT_TRUE(zp->desc.shape.zero_points);
  EXPECT_EQ(zp->desc.packed_bytes, 2048 + 64 + 32);
  // In activation order the group index must be there (it gives the order), and the
  // packed form ends with the order (256 int32).
  for (auto encoding : {v1::SOURCE_ENCODING_GPTQ, v1::SOURCE_ENCODING_PACK_QUANTIZED}) {
    const int64_t zeros = encoding == v1::SOURCE_ENCODING_GPTQ ? 16 : 0;
    v1::WeightHeader act = Int4CheckpointHeader(encoding, v1::DTYPE_FP16, 2048 + zeros + 64 + 1024);
    act.set_act_order(true);
    absl::StatusOr<UploadSpec> spec = CheckWeightHeader(act, *backend, ServiceLimits{});
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_TRUE(spec->desc.shape.act_order);
    EXPECT_EQ(spec->desc.packed_bytes, 2048 + 64 + 1024);
    act.set_total_bytes(2048 + zeros + 64);
    spec = CheckWeightHeader(act, *backend, ServiceLimits{});
    ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(spec.status().message().find(
                  absl::StrCat("header.total_bytes = ", 2048 + zeros + 64, " but a ",
                               v1::SourceEncoding_Name(encoding),
                               " payload in act_order for n = 16, k = 256 with fp16 scales is ",
                               2048 + zeros + 64 + 1024, " bytes (the group index included")),
              absl::string_view::npos)
        << spec.status();
  }
  v1::WeightHeader awq_act =
      Int4CheckpointHeader(v1::SOURCE_ENCODING_AWQ, v1::DTYPE_FP16, 2048 + 16 + 64);
  awq_act.set_zero_points(true);
  awq_act.set_act_order(true);
  absl::StatusOr<UploadSpec> refused = CheckWeightHeader(awq_act, *backend, ServiceLimits{});
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find(
                "header: SOURCE_ENCODING_AWQ: act_order: an AWQ checkpoint has no g_idx"),
            absl::string_view::npos)
      << refused.status();
  // GPTQ packs qzeros in eights of N.
  v1::WeightHeader odd_n = Int4CheckpointHeader(v1::SOURCE_ENCODING_GPTQ, v1::DTYPE_FP16, 0);
  odd_n.set_n(12);
  absl::StatusOr<UploadSpec> spec = CheckWeightHeader(odd_n, *backend, ServiceLimits{});
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(
      spec.status().message().find("header: SOURCE_ENCODING_GPTQ: n = 12 is not a multiple of 8"),
      absl::string_view::npos)
      << spec.status();
}

TEST(CheckWeightHeaderTest, EachBadFieldIsNamed) {
  v1::WeightHeader h = GoodHeader();
  h.set_name("");
  ExpectInvalid(h, "header.name is empty");

  h = GoodHeader();
  h.set_scheme(v1::SCHEME_UNSPECIFIED);
  ExpectInvalid(h, "header.scheme = SCHEME_UNSPECIFIED");
  h.set_scheme(static_cast<v1::Scheme>(42));
  ExpectInvalid(h, "header.scheme = 42");

  h = GoodHeader();
  h.set_group_size(64);
  ExpectInvalid(h, "group_size = 64");
  h = GoodHeader();
  h.set_scheme(v1::SCHEME_W8A16);
  ExpectInvalid(h, "group_size = 128 must be 0");

  h = GoodHeader();
  h.set_encoding(v1::SOURCE_ENCODING_UNSPECIFIED);
  ExpectInvalid(h, "header.encoding = SOURCE_ENCODING_UNSPECIFIED");
  h.set_encoding(static_cast<v1::SourceEncoding>(99));
  ExpectInvalid(h, "header.encoding = 99 is not supported");
  h = GoodHeader();
  h.set_scheme(v1::SCHEME_W8A16);
  h.set_group_size(0);
  h.set_zero_points(true);
  ExpectInvalid(h, "header: zero_points is only for W4A16, must be false for W8A16");
  h.set_zero_points(false);
  h.set_act_order(true);
  ExpectInvalid(h,
                "header: act_order is only for W4A16 with group_size 128, must be false for W8A16");
  h = GoodHeader();
  h.set_group_size(0);
  h.set_act_order(true);
  ExpectInvalid(h, "header: act_order is only for W4A16 with group_size 128");
  h = GoodHeader();
  h.set_act_order(true);
  ExpectInvalid(h, "header.act_order must be false for SOURCE_ENCODING_FLOAT");
  h = GoodHeader();
  h.set_scale_multiplies(true);
  ExpectInvalid(h,
                "header.scale_multiplies applies to the BitNet encodings "
                "(SOURCE_ENCODING_BITNET_HF, SOURCE_ENCODING_BITNET_LIGER) only, not "
                "SOURCE_ENCODING_FLOAT");

  h = GoodHeader();
  h.set_source_dtype(v1::DTYPE_UNSPECIFIED);
  ExpectInvalid(h, "header.source_dtype = DTYPE_UNSPECIFIED");
  h.set_source_dtype(static_cast<v1::DType>(9));
  ExpectInvalid(h, "header.source_dtype = 9");
  h = GoodHeader();
  h.set_encoding(v1::SOURCE_ENCODING_PACKED);
  ExpectInvalid(h, "source_dtype must be unset");

  h = GoodHeader();
  h.set_total_bytes(h.total_bytes() + 1);
  ExpectInvalid(h, "header.total_bytes = 8193 but the payload");
  h.set_total_bytes(-1);
  ExpectInvalid(h, "header.total_bytes = -1");

  h = GoodHeader();
  h.set_sha256(std::string(31, 'x'));
  ExpectInvalid(h, "header.sha256 is 31 bytes, must be 32");
  h.clear_sha256();
  ExpectInvalid(h, "header.sha256 is 0 bytes");
}

TEST(CheckWeightHeaderTest, NegativeZeroAndHugeDimensions) {
  const int64_t dims[] = {0,
                          -1,
                          -256,
                          kMaxDim + 128,
                          int64_t{1} << 40,
                          std::numeric_limits<int64_t>::max(),
                          std::numeric_limits<int64_t>::min()};
  for (int64_t dim : dims) {
    v1::WeightHeader h = GoodHeader();
    h.set_n(dim);
    ExpectInvalid(h, "header: n = ");
    h = GoodHeader();
    h.set_k(dim);
    ExpectInvalid(h, "header: k = ");
  }
  // Each dimension in range, the product not.
  v1::WeightHeader h = GoodHeader();
  h.set_n(kMaxDim);
  h.set_k(kMaxDim);
  ExpectInvalid(h, "n * k");
}

TEST(CheckWeightHeaderTest, KAlignmentIsChecked) {
  v1::WeightHeader h = GoodHeader();
  h.set_k(200);
  ExpectInvalid(h, "k = 200 must be a multiple of 128");
}

TEST(CheckWeightHeaderTest, UploadLimitIsResourceExhausted) {
  std::unique_ptr<Backend> backend = Cpu();
  ServiceLimits limits;
  limits.max_upload_bytes = 1000;
  const absl::Status status = CheckWeightHeader(GoodHeader(), *backend, limits).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(status.message().find("upload limit of 1000"), absl::string_view::npos) << status;
}

// A backend with a stricter shape rule than ValidateShape's.
class PickyBackend : public Backend {
 public:
  std::string_view name() const override { return "picky"; }
  std::string device_name() const override { return "test"; }
  int num_workers() const override { return 1; }
  int64_t memory_total_bytes() const override { return 0; }
  int64_t memory_free_bytes() const override { return 0; }
  absl::Status CheckShape(Scheme, const WeightShape& shape) const override {
    if (shape.n % 64 != 0) return absl::InvalidArgumentError("n must be a multiple of 64");
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<BackendWeight>> Load(const PackedWeight&) override {
    return absl::UnimplementedError("no");
  }
  absl::StatusOr<int64_t> MatMul(int, const MatMulCall&) override {
    return absl::UnimplementedError("no");
  }
};

TEST(CheckWeightHeaderTest, BackendShapeRuleApplies) {
  PickyBackend backend;
  const absl::Status status = CheckWeightHeader(GoodHeader(), backend, ServiceLimits{}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("backend picky: n must be a multiple of 64"),
            absl::string_view::npos)
      << status;
}

// CheckMatMulInput needs a stored weight; its backend part is never touched.
class NullWeight : public BackendWeight {
 public:
  explicit NullWeight(WeightShape shape) : shape_(shape) {}
  Scheme scheme() const override { return Scheme::kW8A16; }
  const WeightShape& shape() const override { return shape_; }
  int64_t device_bytes() const override { return 0; }

 private:
  WeightShape shape_;
};

StoredWeight MakeWeight(Scheme scheme, int64_t n, int64_t k) {
  const WeightShape shape{n, k, 0};
  return StoredWeight("w", WeightDesc{scheme, shape, PackedBytes(scheme, shape)},
                      std::make_unique<NullWeight>(shape), std::make_shared<MemoryBudget>(0), 0);
}

v1::MatMulRequest Request(DType dtype, int64_t m, int64_t k, v1::DType out = v1::DTYPE_FP32) {
  return testing::MakeMatMulRequest("w", dtype, m, k, testing::RandomFloats(m * k, 5), out);
}

void ExpectMatMulError(const v1::MatMulRequest& request, const StoredWeight& weight,
                       absl::string_view needle,
                       absl::StatusCode code = absl::StatusCode::kInvalidArgument,
                       ServiceLimits limits = {}) {
  const absl::Status status = CheckMatMulInput(request, weight, limits).status();
  EXPECT_EQ(status.code(), code) << status;
  EXPECT_NE(status.message().find(needle), absl::string_view::npos)
      << "message: " << status.message() << "\nwanted: " << needle;
}

TEST(CheckMatMulInputTest, AcceptsAConsistentRequest) {
  const StoredWeight weight = MakeWeight(Scheme::kW8A16, 48, 128);
  absl::StatusOr<MatMulSpec> spec =
      CheckMatMulInput(Request(DType::kF16, 3, 128, v1::DTYPE_BF16), weight, ServiceLimits{});
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->x_dtype, DType::kF16);
  EXPECT_EQ(spec->y_dtype, DType::kBF16);
  EXPECT_EQ(spec->m, 3);
  EXPECT_EQ(spec->y_bytes, 3 * 48 * 2);
}

TEST(CheckMatMulInputTest, UnspecifiedOutputDtypeIsTheInputDtype) {
  const StoredWeight weight = MakeWeight(Scheme::kFp16, 8, 64);
  absl::StatusOr<MatMulSpec> spec = CheckMatMulInput(
      Request(DType::kBF16, 1, 64, v1::DTYPE_UNSPECIFIED), weight, ServiceLimits{});
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->y_dtype, DType::kBF16);
}

TEST(CheckMatMulInputTest, EachBadFieldIsNamed) {
  const StoredWeight weight = MakeWeight(Scheme::kW8A16, 48, 128);
  v1::MatMulRequest r = Request(DType::kF32, 2, 128);
  r.mutable_input()->set_dtype(v1::DTYPE_UNSPECIFIED);
  ExpectMatMulError(r, weight, "input.dtype = DTYPE_UNSPECIFIED");
  r.mutable_input()->set_dtype(static_cast<v1::DType>(77));
  ExpectMatMulError(r, weight, "input.dtype = 77");

  r = Request(DType::kF32, 2, 128, static_cast<v1::DType>(5));
  ExpectMatMulError(r, weight, "output_dtype = 5");

  r = Request(DType::kF32, 2, 128);
  r.mutable_input()->add_shape(1);
  ExpectMatMulError(r, weight, "input.shape has 3 dimensions, must be 2");
  r.mutable_input()->clear_shape();
  ExpectMatMulError(r, weight, "input.shape has 0 dimensions");

  r = Request(DType::kF32, 2, 128);
  r.mutable_input()->set_shape(0, 0);
  ExpectMatMulError(r, weight, "input.shape[0] = 0 (M) must be at least 1");
  r.mutable_input()->set_shape(0, -5);
  ExpectMatMulError(r, weight, "input.shape[0] = -5 (M)");
  r.mutable_input()->set_shape(0, std::numeric_limits<int64_t>::max());
  ExpectMatMulError(r, weight, "exceeds max_rows 65536");

  r = Request(DType::kF32, 2, 128);
  r.mutable_input()->set_shape(1, 64);
  ExpectMatMulError(r, weight, "input.shape[1] = 64 does not match K = 128 of weight \"w\"");
  r.mutable_input()->set_shape(1, -128);
  ExpectMatMulError(r, weight, "input.shape[1] = -128");

  r = Request(DType::kF32, 2, 128);
  r.mutable_input()->mutable_data()->pop_back();
  ExpectMatMulError(r, weight, "input.data is 1023 bytes, but shape [2, 128] of fp32 needs 1024");
  // fp16 data labelled fp32: half the bytes.
  r = Request(DType::kF16, 2, 128);
  r.mutable_input()->set_dtype(v1::DTYPE_FP32);
  ExpectMatMulError(r, weight, "input.data is 512 bytes");
}

TEST(CheckMatMulInputTest, MaxRowsIsConfigurable) {
  const StoredWeight weight = MakeWeight(Scheme::kFp16, 8, 64);
  ServiceLimits limits;
  limits.max_rows = 4;
  EXPECT_TRUE(CheckMatMulInput(Request(DType::kF32, 4, 64), weight, limits).ok());
  ExpectMatMulError(Request(DType::kF32, 5, 64), weight,
                    "input.shape[0] = 5 (M) exceeds max_rows 4", absl::StatusCode::kInvalidArgument,
                    limits);
}

TEST(CheckMatMulInputTest, OutputOverTheMessageLimitIsResourceExhausted) {
  const StoredWeight weight = MakeWeight(Scheme::kFp16, 1024, 64);
  ServiceLimits limits;
  limits.max_message_bytes = 2 << 20;
  // 512 rows * 1024 * 4 bytes = 2 MiB of output, just over the limit with the framing.
  ExpectMatMulError(Request(DType::kF32, 512, 64), weight,
                    "would exceed max_message_bytes 2097152; send at most 511 rows",
                    absl::StatusCode::kResourceExhausted, limits);
  // The same rows in fp16 fit.
  EXPECT_TRUE(CheckMatMulInput(Request(DType::kF32, 512, 64, v1::DTYPE_FP16), weight, limits).ok());
}

TEST(CheckMatMulInputTest, W2A8NeedsFiniteActivations) {
  const StoredWeight weight = MakeWeight(Scheme::kW2A8, 8, 128);
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (float bad :
         {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
          std::numeric_limits<float>::quiet_NaN()}) {
      std::vector<float> x = testing::RandomFloats(2 * 128, 3);
      x[128 + 17] = bad;
      const v1::MatMulRequest r = testing::MakeMatMulRequest("w", dtype, 2, 128, x, v1::DTYPE_FP32);
      ExpectMatMulError(r, weight, "input[1][17] is NaN or infinite");
    }
  }
  // Other schemes pass NaN through like any float arithmetic.
  const StoredWeight dense = MakeWeight(Scheme::kFp16, 8, 128);
  std::vector<float> x = testing::RandomFloats(128, 3);
  x[5] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(
      CheckMatMulInput(testing::MakeMatMulRequest("w", DType::kF32, 1, 128, x, v1::DTYPE_FP32),
                       dense, ServiceLimits{})
          .ok());
}

}  // namespace
}  // namespace qmm
