// Precision policy: which dtype the matrix products and stored activations
// use, and how the loss is scaled so small fp16 gradients survive.
//
// Whatever the compute dtype, master weights, AdamW moments, gradient
// accumulation and reduction, layernorm statistics, softmax, the loss and
// every norm stay fp32 (docs/precision.md says why).
#pragma once

#include <string>

#include "core/dtype.h"

namespace loom {

// The value of `precision.compute`.
enum class ComputePrecision { fp32, bf16, fp16 };

// The value of `precision.loss_scale`:
//   off     - the loss is not scaled (scale 1);
//   fixed   - a constant scale (LossScalerOptions::initial_scale);
//   dynamic - grows after clean steps, backs off on overflow (fp16's default).
enum class LossScaleMode { off, fixed, dynamic };

const char* compute_precision_name(ComputePrecision p);  // "fp32", "bf16", "fp16"
const char* loss_scale_mode_name(LossScaleMode m);       // "off", "fixed", "dynamic"

// The dtype of compute weights and activations under this policy.
DType compute_dtype(ComputePrecision p);

// Parse a config value; an unknown name throws UserError naming `field` and
// the accepted values, e.g. "precision.compute: unknown precision 'fp8' ...".
ComputePrecision parse_compute_precision(const std::string& value,
                                         const std::string& field = "precision.compute");
// Accepts "off" | "fixed" (also "static") | "dynamic".
LossScaleMode parse_loss_scale_mode(const std::string& value, const std::string& field = "precision.loss_scale");

// The mode used when the config does not name one: dynamic for fp16 (its
// 5-bit exponent underflows below 6e-8), off for bf16 and fp32 (they share
// fp32's exponent range).
LossScaleMode default_loss_scale_mode(ComputePrecision p);

// fp16 without loss scaling silently loses small gradients, so it is refused
// unless the user says they mean it (`allow_unscaled_fp16`, e.g. a config
// field precision.allow_unscaled_fp16 = true). Throws UserError naming
// `field` (the loss-scale field) otherwise.
void check_loss_scaling(ComputePrecision p, LossScaleMode m, bool allow_unscaled_fp16,
                        const std::string& field = "precision.loss_scale");

}  // namespace loom
