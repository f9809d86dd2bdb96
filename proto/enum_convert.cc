#include "proto/enum_convert.h"

namespace qmm {

v1::DType DTypeToProto(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return v1::DTYPE_FP32;
    case DType::kF16:
      return v1::DTYPE_FP16;
    case DType::kBF16:
      return v1::DTYPE_BF16;
  }
  return v1::DTYPE_UNSPECIFIED;
}

std::optional<DType> DTypeFromProto(v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_FP32:
      return DType::kF32;
    case v1::DTYPE_FP16:
      return DType::kF16;
    case v1::DTYPE_BF16:
      return DType::kBF16;
    default:
      return std::nullopt;
  }
}

v1::Scheme SchemeToProto(Scheme scheme) {
  switch (scheme) {
    case Scheme::kFp16:
      return v1::SCHEME_FP16;
    case Scheme::kBf16:
      return v1::SCHEME_BF16;
    case Scheme::kW8A16:
      return v1::SCHEME_W8A16;
    case Scheme::kW4A16:
      return v1::SCHEME_W4A16;
    case Scheme::kW2A8:
      return v1::SCHEME_W2A8;
  }
  return v1::SCHEME_UNSPECIFIED;
}

std::optional<Scheme> SchemeFromProto(v1::Scheme scheme) {
  switch (scheme) {
    case v1::SCHEME_FP16:
      return Scheme::kFp16;
    case v1::SCHEME_BF16:
      return Scheme::kBf16;
    case v1::SCHEME_W8A16:
      return Scheme::kW8A16;
    case v1::SCHEME_W4A16:
      return Scheme::kW4A16;
    case v1::SCHEME_W2A8:
      return Scheme::kW2A8;
    default:
      return std::nullopt;
  }
}

std::optional<Int4Checkpoint> Int4CheckpointFromProto(v1::SourceEncoding encoding) {
  switch (encoding) {
    case v1::SOURCE_ENCODING_GPTQ:
      return Int4Checkpoint::kGptq;
    case v1::SOURCE_ENCODING_GPTQ_V2:
      return Int4Checkpoint::kGptqV2;
    case v1::SOURCE_ENCODING_PACK_QUANTIZED:
      return Int4Checkpoint::kPackQuantized;
    case v1::SOURCE_ENCODING_AWQ:
      return Int4Checkpoint::kAwq;
    default:
      return std::nullopt;
  }
}

std::optional<Activation> ActivationFromProto(v1::Activation a) {
  switch (a) {
    case v1::ACTIVATION_SILU:
      return Activation::kSilu;
    case v1::ACTIVATION_GELU_TANH:
      return Activation::kGeluTanh;
    case v1::ACTIVATION_RELU:
      return Activation::kRelu;
    case v1::ACTIVATION_RELU_SQUARED:
      return Activation::kReluSquared;
    default:
      return std::nullopt;
  }
}

}  // namespace qmm
