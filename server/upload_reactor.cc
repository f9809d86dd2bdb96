#include "server/upload_reactor.h"

#include <span>
#include <utility>

#include "kernels/bitnet_packing.h"
#include "kernels/int4_checkpoint.h"
#include "kernels/quantize.h"
#include "server/proto_convert.h"

namespace qmm {

UploadReactor::UploadReactor(const ServiceContext& context, grpc::CallbackServerContext* rpc,
                             v1::UploadWeightResponse* response)
    : context_(context),
      rpc_(rpc),
      response_(response),
      clock_(context.metrics, RpcMethod::kUploadWeight) {
  // Refused before a byte of the payload is read.
  if (absl::Status allowed = context.access->CheckAdmin(*rpc, "UploadWeight"); !allowed.ok()) {
    Reply(allowed);
    return;
  }
  StartRead(&request_);
}

void UploadReactor::OnReadDone(bool ok) {
  if (!ok) {
    // The client half-closed, or the call is gone (cancelled, deadline, shutdown).
    if (rpc_->IsCancelled()) {
      Reply(absl::CancelledError("upload cancelled"));
    } else {
      EndOfStream();
    }
    return;
  }
  if (absl::Status status = HandleMessage(); !status.ok()) {
    Reply(status);
    return;
  }
  StartRead(&request_);
}

absl::Status UploadReactor::HandleMessage() {
  switch (request_.msg_case()) {
    case v1::UploadWeightRequest::kHeader:
      if (spec_) return absl::InvalidArgumentError("a second header arrived in one upload");
      return HandleHeader(request_.header());
    case v1::UploadWeightRequest::kChunk:
      if (!spec_) {
        return absl::InvalidArgumentError("the first UploadWeightRequest must carry the header");
      }
      context_.metrics->AddUploadBytes(static_cast<int64_t>(request_.chunk().size()));
      return assembler_->AddChunk(request_.chunk());
    default:
      return absl::InvalidArgumentError("UploadWeightRequest carries neither header nor chunk");
  }
}

absl::Status UploadReactor::HandleHeader(const v1::WeightHeader& header) {
  absl::StatusOr<UploadSpec> spec = CheckWeightHeader(header, *context_.backend, context_.limits);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<WeightStore::Reservation> reservation =
      context_.store->Reserve(spec->name, spec->desc.packed_bytes);
  if (!reservation.ok()) return CountMemoryRejection(reservation.status());
  reservation_.emplace(*std::move(reservation));
  assembler_.emplace(spec->total_bytes, spec->sha256);
  spec_ = *std::move(spec);
  return absl::OkStatus();
}

void UploadReactor::EndOfStream() {
  if (!spec_) {
    Reply(absl::InvalidArgumentError("upload stream ended before the header"));
    return;
  }
  absl::StatusOr<std::vector<uint8_t>> payload = assembler_->Finish();
  if (!payload.ok()) {
    Reply(payload.status());
    return;
  }
  assembler_.reset();
  absl::Status queued =
      context_.loader->Submit([this, payload = *std::move(payload)](int /*worker*/) mutable {
        Reply(LoadAndPublish(std::move(payload)));
      });
  if (!queued.ok()) {
    context_.metrics->RecordRejected(queued.code() == absl::StatusCode::kResourceExhausted
                                         ? RejectReason::kQueueFull
                                         : RejectReason::kDraining);
    Reply(queued);
  }
}

absl::Status UploadReactor::LoadAndPublish(std::vector<uint8_t> payload) {
  if (rpc_->IsCancelled()) return absl::CancelledError("upload cancelled before loading");
  const WeightDesc& desc = spec_->desc;
  std::vector<uint8_t> packed_bytes;
  if (spec_->source_dtype) {
    absl::StatusOr<std::vector<uint8_t>> quantized =
        QuantizeWeight(desc.scheme, desc.shape, *spec_->source_dtype, payload);
    if (!quantized.ok()) return quantized.status();
    packed_bytes = *std::move(quantized);
    payload = {};  // the float values are no longer needed; free them before loading
  } else if (spec_->bitnet) {
    absl::StatusOr<std::vector<uint8_t>> converted =
        BitnetPlanarToPacked(spec_->bitnet->axis, desc.shape, spec_->bitnet->scale_dtype, payload,
                             spec_->bitnet->scale_use);
    if (!converted.ok()) return converted.status();
    packed_bytes = *std::move(converted);
    payload = {};
  } else if (spec_->int4_checkpoint) {
    absl::StatusOr<std::vector<uint8_t>> converted = Int4CheckpointToPacked(
        spec_->int4_checkpoint->format, desc.shape, spec_->int4_checkpoint->scale_dtype, payload);
    if (!converted.ok()) return converted.status();
    packed_bytes = *std::move(converted);
    payload = {};
  } else {
    packed_bytes = std::move(payload);
  }
  absl::StatusOr<PackedWeight> packed = ViewPacked(desc.scheme, desc.shape, packed_bytes);
  if (!packed.ok()) return packed.status();
  absl::StatusOr<std::unique_ptr<BackendWeight>> loaded = context_.backend->Load(*packed);
  if (!loaded.ok()) return CountMemoryRejection(loaded.status());
  absl::StatusOr<std::shared_ptr<const StoredWeight>> stored =
      context_.store->Commit(*std::move(reservation_), desc, *std::move(loaded));
  reservation_.reset();
  if (!stored.ok()) return CountMemoryRejection(stored.status());
  context_.metrics->AddWeight((*stored)->name());
  FillWeightInfo(**stored, response_->mutable_weight());
  return absl::OkStatus();
}

absl::Status UploadReactor::CountMemoryRejection(absl::Status status) {
  if (status.code() == absl::StatusCode::kResourceExhausted) {
    context_.metrics->RecordRejected(RejectReason::kMemoryBudget);
  }
  return status;
}

void UploadReactor::Reply(const absl::Status& status) {
  reservation_.reset();
  assembler_.reset();
  Finish(clock_.Finish(status));
}

}  // namespace qmm
