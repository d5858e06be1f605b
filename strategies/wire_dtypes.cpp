// Which strategies take --reduce-dtype and --param-dtype (docs/bf16.md): the refusals name the flag.
#include <fmt/format.h>

#include "engine/check.h"
#include "strategies/registry.h"

namespace pb {

// fsdp, zero2, their -prefetch variants and hsdp<R>x<S>: parameters sharded, gathered per unit.
bool takes_param_dtype(const std::string& name) {
  int r = 0, s = 0;
  return name.rfind("fsdp", 0) == 0 || name.rfind("zero2", 0) == 0 || parse_hsdp_name(name, &r, &s);
}

// Every strategy that sums gradients over replicas.
bool takes_reduce_dtype(const std::string& name) {
  int d = 0, p = 0;
  Schedule schedule = Schedule::GPipe;
  bool recompute = false;
  return name == "dp" || name == "ddp" || takes_param_dtype(name) ||
         parse_hybrid_name(name, &d, &p, &schedule, &recompute) || parse_dptp_name(name, &d, &p);
}

void check_wire_dtypes(const std::string& name, const StrategyOptions& o) {
  if (o.reduce_dtype != DType::F32 && !takes_reduce_dtype(name))
    throw UsageError(fmt::format("--reduce-dtype {}: strategy {} reduces no gradients over replicas (dp, ddp, fsdp, "
                                 "zero2, hsdp and the dp x pp, dp x tp hybrids do)",
                                 dtype_label(o.reduce_dtype), name));
  if (o.param_dtype == DType::F32) return;
  if (!takes_param_dtype(name))
    throw UsageError(fmt::format("--param-dtype {}: strategy {} gathers no parameters (fsdp, zero2, their -prefetch "
                                 "variants and hsdp do)",
                                 dtype_label(o.param_dtype), name));
  if (o.backend.precision != Precision::Bf16)
    throw UsageError(fmt::format("--param-dtype {} needs --precision bf16 (got {}): the layers would compute in {} on "
                                 "bf16-rounded weights",
                                 dtype_label(o.param_dtype), precision_name(o.backend.precision),
                                 precision_name(o.backend.precision)));
}

}  // namespace pb
