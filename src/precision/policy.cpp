#include "precision/policy.h"

#include "core/check.h"

namespace loom {

const char* compute_precision_name(ComputePrecision p) {
  switch (p) {
    case ComputePrecision::fp32: return "fp32";
    case ComputePrecision::bf16: return "bf16";
    case ComputePrecision::fp16: return "fp16";
  }
  return "?";
}

const char* loss_scale_mode_name(LossScaleMode m) {
  switch (m) {
    case LossScaleMode::off: return "off";
    case LossScaleMode::fixed: return "fixed";
    case LossScaleMode::dynamic: return "dynamic";
  }
  return "?";
}

DType compute_dtype(ComputePrecision p) {
  switch (p) {
    case ComputePrecision::fp32: return DType::f32;
    case ComputePrecision::bf16: return DType::bf16;
    case ComputePrecision::fp16: return DType::f16;
  }
  return DType::f32;
}

ComputePrecision parse_compute_precision(const std::string& value, const std::string& field) {
  // The same spellings parse_dtype accepts, so configs and dtype names agree.
  DType t;
  LOOM_USER_CHECK(parse_dtype(value, &t), "%s: unknown precision '%s' (expected fp32, bf16 or fp16)", field.c_str(),
                  value.c_str());
  switch (t) {
    case DType::f32: return ComputePrecision::fp32;
    case DType::bf16: return ComputePrecision::bf16;
    case DType::f16: return ComputePrecision::fp16;
  }
  return ComputePrecision::fp32;
}

LossScaleMode parse_loss_scale_mode(const std::string& value, const std::string& field) {
  if (value == "off") return LossScaleMode::off;
  if (value == "fixed" || value == "static") return LossScaleMode::fixed;
  if (value == "dynamic") return LossScaleMode::dynamic;
  throw UserError(strprintf("%s: unknown loss scaling '%s' (expected off, fixed or dynamic)", field.c_str(),
                            value.c_str()));
}

LossScaleMode default_loss_scale_mode(ComputePrecision p) {
  return p == ComputePrecision::fp16 ? LossScaleMode::dynamic : LossScaleMode::off;
}

void check_loss_scaling(ComputePrecision p, LossScaleMode m, bool allow_unscaled_fp16, const std::string& field) {
  LOOM_USER_CHECK(p != ComputePrecision::fp16 || m != LossScaleMode::off || allow_unscaled_fp16,
                  "%s: fp16 compute with loss scaling off loses gradients below 6e-8 to underflow; use 'dynamic' "
                  "(or 'fixed'), or set precision.allow_unscaled_fp16 = true if that is intended",
                  field.c_str());
}

}  // namespace loom
