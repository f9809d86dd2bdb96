#include "server/matmul_runner.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "kernels/dtype.h"
#include "server/batcher.h"
#include "server/proto_convert.h"

namespace qmm {
namespace {

constexpr float kFp16Max = 65504.0f;

// Whether `data`, elements of `dtype`, holds a finite value of magnitude above kFp16Max
// (fp16 data cannot). Infinities and NaN do not count: no scaling brings them in range.
bool BeyondFp16(DType dtype, absl::string_view data) {
  if (dtype == DType::kF16) return false;
  bool beyond = false;
  if (dtype == DType::kF32) {
    const size_t count = data.size() / sizeof(float);
    for (size_t i = 0; i < count; ++i) {
      float v;
      std::memcpy(&v, data.data() + i * sizeof(float), sizeof(float));
      beyond |= std::abs(v) > kFp16Max && std::isfinite(v);
    }
    return beyond;
  }
  const size_t count = data.size() / sizeof(uint16_t);
  for (size_t i = 0; i < count; ++i) {
    uint16_t bits;
    std::memcpy(&bits, data.data() + i * sizeof(uint16_t), sizeof(uint16_t));
    const float v = Bf16ToFloat(bits);
    beyond |= std::abs(v) > kFp16Max && std::isfinite(v);
  }
  return beyond;
}

}  // namespace

absl::StatusOr<MatMulJob> PrepareMatMul(const v1::MatMulRequest& request, const WeightStore& store,
                                        const ServiceLimits& limits, const InputRows* beside) {
  if (absl::Status s = CheckWeightName(request.weight(), "weight"); !s.ok()) return s;
  absl::StatusOr<std::shared_ptr<const StoredWeight>> weight = store.Get(request.weight());
  if (!weight.ok()) return weight.status();
  absl::StatusOr<MatMulSpec> spec = CheckMatMulInput(request, **weight, limits, beside);
  if (!spec.ok()) return spec.status();
  const absl::string_view x = beside != nullptr ? beside->data : request.input().data();
  return MatMulJob{*std::move(weight), &request, x, *spec, BeyondFp16(spec->x_dtype, x)};
}

std::string* StartResponse(const MatMulJob& job, v1::MatMulResponse* response) {
  response->Clear();
  v1::Tensor* output = response->mutable_output();
  output->set_dtype(DTypeToProto(job.spec.y_dtype));
  output->add_shape(job.spec.m);
  output->add_shape(job.weight->desc().shape.n);
  return output->mutable_data();
}

absl::Status RunMatMul(Backend& backend, int worker, const MatMulJob& job,
                       v1::MatMulResponse* response, void* output, TransferTimes* transfer) {
  std::string* data = StartResponse(job, response);
  if (output == nullptr) data->resize(job.spec.y_bytes);
  MatMulCall call{
      .weight = &job.weight->backend_weight(),
      .x_dtype = job.spec.x_dtype,
      .x = job.x.data(),
      .m = job.spec.m,
      .y_dtype = job.spec.y_dtype,
      .y = output != nullptr ? output : data->data(),
      .transfer = transfer,
  };
  absl::StatusOr<int64_t> compute_ns = backend.MatMul(worker, call);
  if (!compute_ns.ok()) {
    response->Clear();
    return compute_ns.status();
  }
  response->set_compute_ns(*compute_ns);
  return absl::OkStatus();
}

void DispatchMatMul(const ServiceContext& context, RpcMethod method, RequestControl control,
                    MatMulJob job, v1::MatMulResponse* response,
                    absl::AnyInvocable<void(const absl::Status&) &&> done, void* output,
                    bool registered) {
  context.batcher->Enqueue(BatchRequest{
      .job = std::move(job),
      .response = response,
      .output = output,
      .registered = registered,
      .method = method,
      .deadline = control.deadline,
      .cancelled = std::move(control.cancelled),
      .done = std::move(done),
  });
}

}  // namespace qmm
