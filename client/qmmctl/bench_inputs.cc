#include "client/qmmctl/bench_inputs.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/matmul_messages.h"
#include "client/nd_array.h"
#include "client/qmmctl/verify.h"
#include "client/random_data.h"
#include "kernels/reference.h"

namespace qmm::ctl {
namespace {

using client_internal::BuildForwardRequest;
using client_internal::BuildMatMulRequest;

// The Open Inference Protocol's spelling of the activations' dtype.
const char* InferDatatype(v1::DType dtype) {
  return dtype == v1::DTYPE_FP16 ? "FP16" : dtype == v1::DTYPE_BF16 ? "BF16" : "FP32";
}

// A ModelInfer of the model (or weight) `name` with the activations "x" of `input`.
inference::ModelInferRequest InferOnActivations(const std::string& name, const v1::Tensor& input) {
  inference::ModelInferRequest out;
  out.set_model_name(name);
  inference::ModelInferRequest::InferInputTensor* x = out.add_inputs();
  x->set_name("x");
  x->set_datatype(InferDatatype(input.dtype()));
  *x->mutable_shape() = input.shape();
  out.add_raw_input_contents(input.data());
  return out;
}

// A ModelInfer of the token model `name` with the INT32 input "token_ids".
inference::ModelInferRequest InferOnTokens(const std::string& name,
                                           const std::vector<int32_t>& ids) {
  inference::ModelInferRequest out;
  out.set_model_name(name);
  inference::ModelInferRequest::InferInputTensor* t = out.add_inputs();
  t->set_name("token_ids");
  t->set_datatype("INT32");
  t->add_shape(static_cast<int64_t>(ids.size()));
  std::string bytes(ids.size() * sizeof(int32_t), '\0');
  std::memcpy(bytes.data(), ids.data(), bytes.size());  // little-endian, as the protocol's
  out.add_raw_input_contents(std::move(bytes));
  return out;
}

// `reference(i)` for every input, over the machine's cores.
template <typename Reference>
void ComputeReferences(int count, Reference reference, std::vector<std::vector<double>>& out) {
  std::fprintf(stderr, "bench: computing float64 references of %d inputs...\n", count);
  out.resize(count);
  std::atomic<int> next{0};
  std::vector<std::thread> threads;
  const int workers =
      std::clamp<int>(static_cast<int>(std::thread::hardware_concurrency()), 1, count);
  for (int t = 0; t < workers; ++t) {
    threads.emplace_back([&] {
      for (int i = next++; i < count; i = next++) out[i] = reference(i);
    });
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace

absl::StatusOr<BenchInputs> WeightInputs(const BenchOptions& o, const v1::WeightInfo& w,
                                         Scheme scheme) {
  BenchInputs inputs;
  std::vector<std::vector<float>> sent(o.inputs);  // the values as the server will see them
  for (int i = 0; i < o.inputs; ++i) {
    const NdArray x =
        FromFloats(o.dtype, {o.rows, w.k()}, RandomActivationValues(o.rows, w.k(), o.seed + i));
    v1::MatMulRequest& request = inputs.matmul.emplace_back();
    if (absl::Status s = BuildMatMulRequest(o.weight, x, o.output_dtype, &request); !s.ok()) {
      return s;
    }
    if (o.verify_seed) sent[i] = ToFloats(x);
    if (o.open_inference) inputs.infer.push_back(InferOnActivations(o.weight, request.input()));
  }
  if (!o.verify_seed) return inputs;

  const WeightShape shape{w.n(), w.k(), w.group_size(), w.zero_points(), w.act_order()};
  absl::StatusOr<std::vector<uint8_t>> packed = PackRandomWeight(scheme, shape, *o.verify_seed);
  if (!packed.ok()) return packed.status();
  absl::StatusOr<PackedWeight> view = ViewPacked(scheme, shape, *packed);
  if (!view.ok()) return view.status();
  ComputeReferences(
      o.inputs, [&](int i) { return ReferenceMatMul(*view, sent[i].data(), o.rows); },
      inputs.references);
  return inputs;
}

absl::StatusOr<BenchInputs> ModelInputs(
    const BenchOptions& o, const v1::ModelInfo& model, int64_t vocab,
    const std::map<std::string, RandomWeight, std::less<>>& weights) {
  BenchInputs inputs;
  std::vector<std::vector<int32_t>> ids(o.inputs);
  std::vector<std::vector<float>> sent(o.inputs);
  for (int i = 0; i < o.inputs; ++i) {
    v1::ForwardRequest& request = inputs.forward.emplace_back();
    if (model.token_input()) {
      ids[i] = RandomTokenIds(o.rows, vocab, o.seed + i);
      BuildForwardRequest(o.model, ids[i], o.output_dtype, &request);
      if (o.open_inference) inputs.infer.push_back(InferOnTokens(o.model, ids[i]));
    } else {
      const NdArray x = FromFloats(o.dtype, {o.rows, model.in_features()},
                                   RandomActivationValues(o.rows, model.in_features(), o.seed + i));
      if (absl::Status s = BuildForwardRequest(o.model, x, o.output_dtype, &request); !s.ok()) {
        return s;
      }
      if (!o.verify_seeds.empty()) sent[i] = ToFloats(x);
      if (o.open_inference) inputs.infer.push_back(InferOnActivations(o.model, request.input()));
    }
  }
  if (o.verify_seeds.empty()) return inputs;

  // The reference packs the model's weights on each call: compute every input's rows in
  // one call (the layers treat rows independently), then cut them apart.
  std::vector<int32_t> all_ids;
  std::vector<float> all_x;
  for (int i = 0; i < o.inputs; ++i) {
    all_ids.insert(all_ids.end(), ids[i].begin(), ids[i].end());
    all_x.insert(all_x.end(), sent[i].begin(), sent[i].end());
  }
  std::fprintf(stderr, "bench: computing float64 references of %d inputs...\n", o.inputs);
  absl::StatusOr<std::vector<double>> all = ReferenceForRandomModel(
      model, weights, all_ids, all_x, static_cast<int64_t>(o.inputs) * o.rows);
  if (!all.ok()) return all.status();
  const size_t per_input = static_cast<size_t>(o.rows * model.out_features());
  for (int i = 0; i < o.inputs; ++i) {
    inputs.references.emplace_back(all->begin() + i * per_input,
                                   all->begin() + (i + 1) * per_input);
  }
  return inputs;
}

}  // namespace qmm::ctl
