// Which strategies take --reduce-dtype and --param-dtype (docs/bf16.md): the refusals name the flag.
#include <fmt/format.h>

#include "engine/check.h"
#include "strategies/registry.h"

namespace pb {

namespace {
// fsdp, zero2, their -prefetch variants and hsdp<R>x<S>: parameters sharded, gathered per unit.
bool gathers_params(const StrategySpec& s) {
  for (const char* e : {"fsdp", "zero2", "fsdp-prefetch", "zero2-prefetch"})
    if (s.entry == e) return true;
  return s.member_of(kHsdpFamily);
}
}  // namespace

bool takes_param_dtype(const std::string& name) {
  const auto s = parse_strategy(name);
  return s && gathers_params(*s);
}

// Every strategy that sums gradients over replicas.
bool takes_reduce_dtype(const std::string& name) {
  const auto s = parse_strategy(name);
  return s && (s->entry == "dp" || s->entry == "ddp" || gathers_params(*s) || s->member_of(kHybridFamily) ||
               s->member_of(kDpTpFamily));
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
