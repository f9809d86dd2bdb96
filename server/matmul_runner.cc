#include "server/matmul_runner.h"

#include <string>

#include "server/proto_convert.h"

namespace qmm {

absl::StatusOr<MatMulJob> PrepareMatMul(const v1::MatMulRequest& request, const WeightStore& store,
                                        const ServiceLimits& limits) {
  if (absl::Status s = CheckWeightName(request.weight(), "weight"); !s.ok()) return s;
  absl::StatusOr<std::shared_ptr<const StoredWeight>> weight = store.Get(request.weight());
  if (!weight.ok()) return weight.status();
  absl::StatusOr<MatMulSpec> spec = CheckMatMulInput(request, **weight, limits);
  if (!spec.ok()) return spec.status();
  return MatMulJob{*std::move(weight), &request, *spec};
}

absl::Status RunMatMul(Backend& backend, int worker, const MatMulJob& job,
                       v1::MatMulResponse* response) {
  response->Clear();
  v1::Tensor* output = response->mutable_output();
  output->set_dtype(DTypeToProto(job.spec.y_dtype));
  output->add_shape(job.spec.m);
  output->add_shape(job.weight->desc().shape.n);
  std::string* data = output->mutable_data();
  data->resize(job.spec.y_bytes);
  MatMulCall call{
      .weight = &job.weight->backend_weight(),
      .x_dtype = job.spec.x_dtype,
      .x = job.request->input().data().data(),
      .m = job.spec.m,
      .y_dtype = job.spec.y_dtype,
      .y = data->data(),
  };
  absl::StatusOr<int64_t> compute_ns = backend.MatMul(worker, call);
  if (!compute_ns.ok()) {
    response->Clear();
    return compute_ns.status();
  }
  response->set_compute_ns(*compute_ns);
  return absl::OkStatus();
}

}  // namespace qmm
