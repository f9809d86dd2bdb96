// The model RPCs through the in-process server (CPU backend): CreateModel / GetModel /
// ListModels / DeleteModel, Forward and ForwardStream against the float64 composition of
// the single-layer references (kernels/layers_reference.h), every error at creation and
// at call time, the weight-in-use rule, and concurrent callers batched together.
//
// Tolerance of an element: |y - ref| <= tol * (|ref| + rms(ref)) with tol 1e-4 (fp32 math
// through the chain), 3e-3 when a W2A8 layer quantizes activations (one int8 step may
// flip next to a .5 boundary), plus the output dtype's unit roundoff times |ref|.
#include <gtest/gtest.h>

#include <cmath>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/chain.h"
#include "kernels/format.h"
#include "kernels/layers_reference.h"
#include "server/proto_convert.h"
#include "tests/server/gated_backend.h"
#include "tests/server/server_test_util.h"

namespace qmm {
namespace {

using testing::FromBytes;
using testing::RandomFloats;
using testing::ToBytes;

class ServiceForwardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.memory_limit_bytes = int64_t{256} << 20;
    options.max_queue_delay = absl::Milliseconds(2);
    server_ = testing::StartTestServer(options, /*workers=*/2);
    ASSERT_NE(server_.stub, nullptr);
  }

  // Uploads a random weight and keeps its packed form for the reference.
  const PackedWeight* Upload(const std::string& name, Scheme scheme, WeightShape shape,
                             uint32_t seed) {
    return &weights_.Upload(*server_.stub, name, scheme, shape, seed);
  }

  grpc::Status Create(const v1::CreateModelRequest& request, v1::ModelInfo* info = nullptr) {
    grpc::ClientContext context;
    v1::ModelInfo local;
    return server_.stub->CreateModel(&context, request, info != nullptr ? info : &local);
  }

  grpc::Status Forward(const v1::ForwardRequest& request, v1::ForwardResponse* response) {
    grpc::ClientContext context;
    return server_.stub->Forward(&context, request, response);
  }

  static v1::ForwardRequest FloatRequest(const std::string& model, DType dtype, int64_t m,
                                         int64_t f, const std::vector<float>& x,
                                         v1::DType output = v1::DTYPE_UNSPECIFIED) {
    v1::ForwardRequest r;
    r.set_model(model);
    r.mutable_input()->set_dtype(DTypeToProto(dtype));
    r.mutable_input()->add_shape(m);
    r.mutable_input()->add_shape(f);
    r.mutable_input()->set_data(ToBytes(dtype, x));
    r.set_output_dtype(output);
    return r;
  }

  static void ExpectClose(const std::vector<float>& y, const std::vector<double>& ref, double tol,
                          DType y_dtype, const std::string& what) {
    ASSERT_EQ(y.size(), ref.size()) << what;
    double sum2 = 0;
    for (double r : ref) sum2 += r * r;
    const double rms = std::sqrt(sum2 / ref.size());
    ASSERT_GT(rms, 0) << what;
    const double u =
        y_dtype == DType::kF32 ? 0 : std::ldexp(1.0, y_dtype == DType::kF16 ? -11 : -8);
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_TRUE(std::isfinite(y[i])) << what << " element " << i;
      ASSERT_NEAR(y[i], ref[i], tol * (std::fabs(ref[i]) + rms) + u * std::fabs(ref[i]))
          << what << " element " << i;
    }
  }

  // A Llama-style block on 128 features: DyT, SwiGLU (W4A16 gate/up, W2A8 down) with its
  // residual, then GELU and a W8A16 projection to 24 with a bias. Returns its
  // reference layers; the model is created on the server as `name`.
  std::vector<CpuChainLayer> CreateBlock(const std::string& name, bool embedding) {
    const PackedWeight* gate = Upload(name + "/gate", Scheme::kW4A16, {256, 128, 128}, 1);
    const PackedWeight* up = Upload(name + "/up", Scheme::kW4A16, {256, 128, 128}, 2);
    const PackedWeight* down = Upload(name + "/down", Scheme::kW2A8, {128, 256, 0}, 3);
    const PackedWeight* head = Upload(name + "/head", Scheme::kW8A16, {24, 128, 0}, 4);
    params_.push_back(RandomFloats(128, 5));  // gamma
    const float* gamma = params_.back().data();
    params_.push_back(RandomFloats(24, 6));  // bias
    const float* bias = params_.back().data();

    v1::CreateModelRequest r;
    r.set_name(name);
    std::vector<CpuChainLayer> ref;
    if (embedding) {
      const PackedWeight* table = Upload(name + "/tok", Scheme::kBf16, {50, 128, 0}, 7);
      r.add_layers()->mutable_embedding()->set_weight(name + "/tok");
      ref.push_back({.kind = LayerKind::kEmbedding, .weights = {table}, .out_features = 128});
    }
    const int start = static_cast<int>(ref.size());
    v1::DyTLayer* dyt = r.add_layers()->mutable_dyt();
    dyt->set_alpha(0.75f);
    for (int i = 0; i < 128; ++i) dyt->add_gamma(gamma[i]);
    ref.push_back({.kind = LayerKind::kDyT,
                   .alpha = 0.75f,
                   .gamma = gamma,
                   .in_features = 128,
                   .out_features = 128});
    v1::GatedMlpLayer* mlp = r.add_layers()->mutable_gated_mlp();
    mlp->set_gate(name + "/gate");
    mlp->set_up(name + "/up");
    mlp->set_down(name + "/down");
    ref.push_back({.kind = LayerKind::kGatedMlp,
                   .weights = {gate, up, down},
                   .in_features = 128,
                   .out_features = 128});
    r.add_layers()->mutable_residual()->set_block_start(start);
    ref.push_back({.kind = LayerKind::kResidual,
                   .block_start = start,
                   .in_features = 128,
                   .out_features = 128});
    v1::RmsNormLayer* norm = r.add_layers()->mutable_rms_norm();
    norm->set_epsilon(1e-5f);
    for (int i = 0; i < 128; ++i) norm->add_weight(gamma[i]);
    ref.push_back({.kind = LayerKind::kRmsNorm,
                   .gamma = gamma,
                   .epsilon = 1e-5f,
                   .in_features = 128,
                   .out_features = 128});
    r.add_layers()->mutable_activation()->set_kind(v1::ACTIVATION_GELU_TANH);
    ref.push_back({.kind = LayerKind::kActivation,
                   .activation = Activation::kGeluTanh,
                   .in_features = 128,
                   .out_features = 128});
    v1::LinearLayer* linear = r.add_layers()->mutable_linear();
    linear->set_weight(name + "/head");
    for (int i = 0; i < 24; ++i) linear->add_bias(bias[i]);
    ref.push_back({.kind = LayerKind::kLinear,
                   .weights = {head},
                   .bias = bias,
                   .in_features = 128,
                   .out_features = 24});
    v1::ModelInfo info;
    const grpc::Status status = Create(r, &info);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return ref;
  }

  testing::TestServer server_;
  testing::ReferenceWeights weights_;
  std::deque<std::vector<float>> params_;
};

TEST_F(ServiceForwardTest, ForwardMatchesTheReferenceForEveryDType) {
  const std::vector<CpuChainLayer> ref = CreateBlock("block", false);
  uint32_t seed = 100;
  for (int64_t m : {1, 3, 17}) {
    for (DType x_dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (DType y_dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
        const std::vector<float> x = RandomFloats(m * 128, seed++);
        v1::ForwardResponse response;
        const grpc::Status status =
            Forward(FloatRequest("block", x_dtype, m, 128, x, DTypeToProto(y_dtype)), &response);
        ASSERT_TRUE(status.ok()) << status.error_message();
        EXPECT_EQ(response.output().dtype(), DTypeToProto(y_dtype));
        ASSERT_EQ(response.output().shape_size(), 2);
        EXPECT_EQ(response.output().shape(0), m);
        EXPECT_EQ(response.output().shape(1), 24);
        EXPECT_GT(response.compute_ns(), 0);
        const std::vector<float> wire = FromBytes(x_dtype, ToBytes(x_dtype, x));
        ExpectClose(FromBytes(y_dtype, response.output().data()), ReferenceChain(ref, {}, wire, m),
                    3e-3, y_dtype,
                    absl::StrCat("m", m, " ", std::string(DTypeName(x_dtype)), "->",
                                 std::string(DTypeName(y_dtype))));
      }
    }
  }
}

TEST_F(ServiceForwardTest, TokenInputAndStream) {
  const std::vector<CpuChainLayer> ref = CreateBlock("lm", true);
  grpc::ClientContext context;
  auto stream = server_.stub->ForwardStream(&context);
  std::vector<std::vector<int32_t>> sent;
  for (int i = 0; i < 4; ++i) {
    v1::ForwardRequest r;
    r.set_model("lm");
    std::vector<int32_t> ids;
    for (int j = 0; j <= i; ++j) ids.push_back((7 * i + 3 * j) % 50);
    r.mutable_token_ids()->Add(ids.begin(), ids.end());
    ASSERT_TRUE(stream->Write(r));
    sent.push_back(ids);
  }
  stream->WritesDone();
  for (const std::vector<int32_t>& ids : sent) {
    v1::ForwardResponse response;
    ASSERT_TRUE(stream->Read(&response));
    EXPECT_EQ(response.output().dtype(), v1::DTYPE_FP32);  // token input: fp32 by default
    ExpectClose(FromBytes(DType::kF32, response.output().data()),
                ReferenceChain(ref, ids, {}, static_cast<int64_t>(ids.size())), 3e-3, DType::kF32,
                absl::StrCat(ids.size(), " tokens"));
  }
  EXPECT_TRUE(stream->Finish().ok());
}

// BitNet b1.58 2B4T's MLP block, every weight ternary: RMSNorm, the gated MLP with relu2
// and its sub-norm (ffn_sub_norm) over the 384 intermediate features, the residual.
TEST_F(ServiceForwardTest, BitNetMlpBlockWithItsSubNorm) {
  const PackedWeight* gate = Upload("bitnet/gate", Scheme::kW2A8, {384, 128, 0}, 11);
  const PackedWeight* up = Upload("bitnet/up", Scheme::kW2A8, {384, 128, 0}, 12);
  const PackedWeight* down = Upload("bitnet/down", Scheme::kW2A8, {128, 384, 0}, 13);
  std::vector<float> norm(128), sub_norm(384);
  for (int i = 0; i < 128; ++i) norm[i] = 0.75f + 0.005f * static_cast<float>(i);
  for (int i = 0; i < 384; ++i) sub_norm[i] = 1.25f - 0.002f * static_cast<float>(i);
  v1::CreateModelRequest r;
  r.set_name("bitnet");
  v1::RmsNormLayer* input_norm = r.add_layers()->mutable_rms_norm();
  input_norm->set_epsilon(1e-5f);
  input_norm->mutable_weight()->Add(norm.begin(), norm.end());
  v1::GatedMlpLayer* mlp = r.add_layers()->mutable_gated_mlp();
  mlp->set_gate("bitnet/gate");
  mlp->set_up("bitnet/up");
  mlp->set_down("bitnet/down");
  mlp->set_activation(v1::ACTIVATION_RELU_SQUARED);
  mlp->mutable_sub_norm()->set_epsilon(1e-6f);
  mlp->mutable_sub_norm()->mutable_weight()->Add(sub_norm.begin(), sub_norm.end());
  r.add_layers()->mutable_residual()->set_block_start(0);
  v1::ModelInfo info;
  const grpc::Status created = Create(r, &info);
  ASSERT_TRUE(created.ok()) << created.error_message();
  EXPECT_EQ(info.param_bytes(), (128 + 384) * 4);
  EXPECT_EQ(info.layers(1).gated_mlp().sub_norm().weight_size(), 0);  // as ListModels
  grpc::ClientContext get_context;
  v1::GetModelRequest get;
  get.set_name("bitnet");
  ASSERT_TRUE(server_.stub->GetModel(&get_context, get, &info).ok());
  EXPECT_EQ(info.layers(1).gated_mlp().sub_norm().weight_size(), 384);
  EXPECT_FLOAT_EQ(info.layers(1).gated_mlp().sub_norm().epsilon(), 1e-6f);
  const std::vector<CpuChainLayer> ref = {
      {.kind = LayerKind::kRmsNorm,
       .gamma = norm.data(),
       .epsilon = 1e-5f,
       .in_features = 128,
       .out_features = 128},
      {.kind = LayerKind::kGatedMlp,
       .weights = {gate, up, down},
       .gamma = sub_norm.data(),
       .epsilon = 1e-6f,
       .gate_activation = Activation::kReluSquared,
       .in_features = 128,
       .out_features = 128},
      {.kind = LayerKind::kResidual, .block_start = 0, .in_features = 128, .out_features = 128},
  };
  for (int64_t m : {1, 5}) {
    const std::vector<float> x = RandomFloats(m * 128, static_cast<uint32_t>(40 + m));
    v1::ForwardResponse response;
    const grpc::Status status = Forward(FloatRequest("bitnet", DType::kF32, m, 128, x), &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ExpectClose(FromBytes(DType::kF32, response.output().data()), ReferenceChain(ref, {}, x, m),
                3e-3, DType::kF32, absl::StrCat("bitnet m", m));
  }
}

TEST_F(ServiceForwardTest, AFailedStreamRequestEndsTheStreamWithItsStatus) {
  CreateBlock("block", false);
  grpc::ClientContext context;
  auto stream = server_.stub->ForwardStream(&context);
  ASSERT_TRUE(stream->Write(FloatRequest("block", DType::kF32, 1, 128, RandomFloats(128, 1))));
  ASSERT_TRUE(stream->Write(FloatRequest("block", DType::kF32, 1, 127, RandomFloats(127, 1))));
  stream->WritesDone();
  v1::ForwardResponse response;
  EXPECT_TRUE(stream->Read(&response));
  EXPECT_FALSE(stream->Read(&response));
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("input.shape[1] = 127"), std::string::npos);
}

TEST_F(ServiceForwardTest, GetListDeleteAndTheWeightInUseRule) {
  CreateBlock("b", false);
  grpc::ClientContext get_context;
  v1::GetModelRequest get;
  get.set_name("b");
  v1::ModelInfo info;
  ASSERT_TRUE(server_.stub->GetModel(&get_context, get, &info).ok());
  EXPECT_EQ(info.name(), "b");
  EXPECT_EQ(info.layers_size(), 6);
  EXPECT_EQ(info.layers(0).dyt().gamma_size(), 128);
  EXPECT_FALSE(info.token_input());
  EXPECT_EQ(info.in_features(), 128);
  EXPECT_EQ(info.out_features(), 24);
  EXPECT_EQ(info.weights_size(), 4);
  EXPECT_EQ(info.param_bytes(), (128 + 128 + 24) * 4);

  CreateBlock("a", false);
  grpc::ClientContext list_context;
  v1::ListModelsResponse list;
  ASSERT_TRUE(server_.stub->ListModels(&list_context, v1::ListModelsRequest(), &list).ok());
  ASSERT_EQ(list.models_size(), 2);
  EXPECT_EQ(list.models(0).name(), "a");
  EXPECT_EQ(list.models(1).name(), "b");
  EXPECT_EQ(list.models(1).layers(0).dyt().gamma_size(), 0);  // no parameter values
  EXPECT_EQ(list.models(1).layers(3).rms_norm().weight_size(), 0);
  EXPECT_FLOAT_EQ(list.models(1).layers(3).rms_norm().epsilon(), 1e-5f);

  // A weight a model uses cannot be deleted; the error names the model.
  {
    grpc::ClientContext context;
    v1::DeleteWeightRequest del;
    del.set_name("b/down");
    v1::DeleteWeightResponse unused;
    const grpc::Status status = server_.stub->DeleteWeight(&context, del, &unused);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_EQ(status.error_message(), "weight \"b/down\" is used by model \"b\"; delete it first");
  }
  {
    grpc::ClientContext context;
    v1::DeleteModelRequest del;
    del.set_name("b");
    v1::DeleteModelResponse unused;
    ASSERT_TRUE(server_.stub->DeleteModel(&context, del, &unused).ok());
  }
  {
    grpc::ClientContext context;
    v1::DeleteModelRequest del;
    del.set_name("b");
    v1::DeleteModelResponse unused;
    EXPECT_EQ(server_.stub->DeleteModel(&context, del, &unused).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
  {
    grpc::ClientContext context;
    v1::DeleteWeightRequest del;
    del.set_name("b/down");
    v1::DeleteWeightResponse unused;
    EXPECT_TRUE(server_.stub->DeleteWeight(&context, del, &unused).ok());
  }
  v1::ForwardResponse response;
  const grpc::Status gone =
      Forward(FloatRequest("b", DType::kF32, 1, 128, RandomFloats(128, 1)), &response);
  EXPECT_EQ(gone.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(gone.error_message(), "model \"b\" not found");
  grpc::ClientContext context;
  get.set_name("nope");
  EXPECT_EQ(server_.stub->GetModel(&context, get, &info).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(ServiceForwardTest, CreationAndCallErrors) {
  Upload("w", Scheme::kW8A16, {64, 128, 0}, 1);
  v1::CreateModelRequest r;
  r.set_name("m");
  r.add_layers()->mutable_linear()->set_weight("missing");
  grpc::Status s = Create(r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.error_message(), "layers[0].linear.weight: weight \"missing\" not found");

  r.mutable_layers(0)->mutable_linear()->set_weight("w");
  r.add_layers()->mutable_linear()->set_weight("w");  // 64 features into K = 128
  s = Create(r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("layers[1].linear.weight"), std::string::npos);

  r.mutable_layers()->RemoveLast();
  ASSERT_TRUE(Create(r).ok());
  s = Create(r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(s.error_message(), "model \"m\" already exists");

  v1::ForwardResponse response;
  s = Forward(FloatRequest("m", DType::kF32, 2, 64, RandomFloats(128, 1)), &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("does not match in_features = 128"), std::string::npos);
  v1::ForwardRequest tokens;
  tokens.set_model("m");
  tokens.add_token_ids(1);
  s = Forward(tokens, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  tokens.set_model("bad name");
  s = Forward(tokens, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ServiceForwardTest, ConcurrentCallersGetTheirOwnRows) {
  const std::vector<CpuChainLayer> ref = CreateBlock("block", false);
  constexpr int kThreads = 8;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 6; ++i) {
        const int64_t m = 1 + (t + i) % 3;
        const std::vector<float> x = RandomFloats(m * 128, 1000 * t + i);
        v1::ForwardResponse response;
        const grpc::Status status =
            Forward(FloatRequest("block", DType::kF32, m, 128, x), &response);
        ASSERT_TRUE(status.ok()) << status.error_message();
        ExpectClose(FromBytes(DType::kF32, response.output().data()), ReferenceChain(ref, {}, x, m),
                    3e-3, DType::kF32, absl::StrCat("thread ", t, " call ", i));
      }
    });
  }
  for (std::thread& th : threads) th.join();
}

// Forward requests share the MatMul batcher: requests that wait behind a running launch of
// their model go together in the next one (each still gets exactly its own rows), and the
// queue's drops apply (deadline passed, model deleted while waiting). A GatedBackend holds
// the first launch so that the others queue deterministically.
class ForwardBatchingTest : public ServiceForwardTest {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.memory_limit_bytes = int64_t{256} << 20;
    int port = 0;
    qmm_server_ = testing::StartGatedServer(options, &port, &gate_);
    ASSERT_NE(qmm_server_, nullptr);
    server_.channel =
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
    server_.stub = v1::Qmm::NewStub(server_.channel);
  }
  void TearDown() override {
    if (qmm_server_ == nullptr) return;
    gate_->Open();
    qmm_server_->Shutdown();
  }

  v1::BatchingStats Stats() {
    grpc::ClientContext context;
    v1::ServerInfoResponse info;
    EXPECT_TRUE(server_.stub->ServerInfo(&context, v1::ServerInfoRequest(), &info).ok());
    return info.batching();
  }
  // Waits until `waiting` requests are queued (not launched).
  bool WaitForWaiting(int64_t waiting) {
    const absl::Time until = absl::Now() + absl::Seconds(30);
    while (absl::Now() < until) {
      if (Stats().waiting_requests() == waiting) return true;
      absl::SleepFor(absl::Milliseconds(2));
    }
    return false;
  }

  std::unique_ptr<QmmServer> qmm_server_;
  testing::GatedBackend* gate_ = nullptr;
};

TEST_F(ForwardBatchingTest, RequestsWaitingBehindALaunchGoTogether) {
  const std::vector<CpuChainLayer> ref = CreateBlock("block", false);
  gate_->Close();
  constexpr int kCallers = 7;
  std::vector<std::vector<float>> x(kCallers);
  std::vector<int64_t> m(kCallers);
  std::vector<grpc::Status> status(kCallers);
  std::vector<v1::ForwardResponse> response(kCallers);
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    m[c] = 1 + c % 3;
    x[c] = RandomFloats(m[c] * 128, 500 + c);
    if (c == 1) {
      ASSERT_TRUE(gate_->WaitForCalls(1));  // the first launch is held
    }
    callers.emplace_back([&, c] {
      status[c] = Forward(FloatRequest("block", DType::kF32, m[c], 128, x[c]), &response[c]);
    });
  }
  ASSERT_TRUE(WaitForWaiting(kCallers - 1));
  gate_->Open();
  for (std::thread& t : callers) t.join();
  for (int c = 0; c < kCallers; ++c) {
    ASSERT_TRUE(status[c].ok()) << status[c].error_message();
    ExpectClose(FromBytes(DType::kF32, response[c].output().data()),
                ReferenceChain(ref, {}, x[c], m[c]), 3e-3, DType::kF32, absl::StrCat("caller ", c));
  }
  const v1::BatchingStats s = Stats();
  EXPECT_EQ(s.requests(), kCallers);
  EXPECT_EQ(s.launches(), 2);  // the held one, then every waiting request together
  EXPECT_EQ(s.multi_request_launches(), 1);
  EXPECT_EQ(s.max_requests_per_launch(), kCallers - 1);
  const std::vector<testing::GatedBackend::Call> calls = gate_->calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].weight, nullptr);  // a Forward
  EXPECT_EQ(calls[1].m, s.max_rows_per_launch());
}

TEST_F(ForwardBatchingTest, DeadlinesAndDeletionDropQueuedRequests) {
  CreateBlock("block", false);
  gate_->Close();
  v1::ForwardResponse first_response;
  grpc::Status first;
  std::thread holder([&] {
    first =
        Forward(FloatRequest("block", DType::kF32, 1, 128, RandomFloats(128, 1)), &first_response);
  });
  ASSERT_TRUE(gate_->WaitForCalls(1));
  // Queued behind the held launch: one with a short deadline, one without.
  grpc::Status late, orphan;
  std::thread late_caller([&] {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Milliseconds(50)));
    v1::ForwardResponse r;
    late = server_.stub->Forward(
        &context, FloatRequest("block", DType::kF32, 1, 128, RandomFloats(128, 2)), &r);
  });
  late_caller.join();
  EXPECT_EQ(late.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  std::thread orphan_caller([&] {
    v1::ForwardResponse r;
    orphan = Forward(FloatRequest("block", DType::kF32, 1, 128, RandomFloats(128, 3)), &r);
  });
  ASSERT_TRUE(WaitForWaiting(2));  // the late one still counts until its launch drops it
  {
    grpc::ClientContext context;
    v1::DeleteModelRequest del;
    del.set_name("block");
    v1::DeleteModelResponse unused;
    ASSERT_TRUE(server_.stub->DeleteModel(&context, del, &unused).ok());
  }
  gate_->Open();
  holder.join();
  orphan_caller.join();
  EXPECT_TRUE(first.ok()) << first.error_message();  // running launches finish normally
  EXPECT_EQ(orphan.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(orphan.error_message(), "model \"block\" was deleted while the request waited");
  EXPECT_EQ(gate_->calls().size(), 1u);  // neither queued request launched
  const v1::BatchingStats s = Stats();
  EXPECT_EQ(s.dropped_weight_deleted() + s.dropped_deadline(), 2);
}

}  // namespace
}  // namespace qmm
