// The run-to-report contract: every counter and context key `parbench run` writes and reports/
// read, with its unit and meaning. Writer and readers use these names; docs/reports.md lists
// the same keys (a test checks it).
#pragma once

namespace pb::reports::schema {

// Whether two runs must agree on a context key to be compared (or tabulated together).
enum class Match {
  No,      // informative only
  Always,  // the environment, or what changes the work or the arithmetic
  Cpu,     // only when either run is a CPU run (there the CPU is the device)
};

struct Key {
  const char* name;
  const char* unit;     // "-" for text
  const char* meaning;
  Match match = Match::No;
};

// ---- counters: one per benchmark repetition, numbers --------------------------------------
namespace counter {
inline constexpr Key samples_per_s{"samples_per_s", "samples/s", "global batch x iterations / measured time (a rate)"};
inline constexpr Key flop_per_s{"flop_per_s", "FLOP/s", "3 x forward FLOPs per sample x global batch x iterations / measured time"};
inline constexpr Key global_batch{"global_batch", "samples", "samples per iteration"};
inline constexpr Key devices{"devices", "count", "N, the devices (workers) of the configuration"};
inline constexpr Key peak_bytes_max{"peak_bytes_max", "bytes", "peak allocated bytes since setup, the largest over the workers"};
inline constexpr Key peak_bytes_dev0{"peak_bytes_dev0", "bytes", "peak allocated bytes since setup on worker 0"};
inline constexpr Key comm_bytes_per_iter{"comm_bytes_per_iter", "bytes", "bytes sent per iteration, summed over the workers"};
inline constexpr Key comm_s_per_iter{"comm_s_per_iter", "s", "communication seconds per iteration, the largest over the workers: the transfers alone (in-process: the copies, not the wait for peers; NCCL: the collectives' span on the GPU stream; MPI: the whole calls, waiting included)"};
inline constexpr Key bubble_fraction{"bubble_fraction", "fraction", "(P-1)/(M+P-1) as the strategy reports it (pipeline; mp is M = 1)"};
inline constexpr Key micro_batches{"micro_batches", "count", "micro-batches the last step ran"};
inline constexpr Key workers_used{"workers_used", "count", "workers that got work (torch.chunk may give fewer chunks than devices)"};
inline constexpr Key oversubscribed{"oversubscribed", "0/1", "1 when workers share GPUs (--oversubscribe)"};
inline constexpr Key iter_cv{"iter_cv", "fraction", "CV of the iteration times within this repetition"};
}  // namespace counter

inline constexpr Key kCounters[] = {
    counter::samples_per_s,  counter::flop_per_s,      counter::global_batch,        counter::devices,
    counter::peak_bytes_max, counter::peak_bytes_dev0, counter::comm_bytes_per_iter, counter::comm_s_per_iter,
    counter::bubble_fraction, counter::micro_batches,  counter::workers_used,        counter::oversubscribed,
    counter::iter_cv};

// ---- context: one per run, text ----------------------------------------------------------
namespace context {
using M = Match;
inline constexpr Key timing{"timing", "-",
                            "manual: every iteration timed by parbench itself (steady clock, devices synchronized); "
                            "Google Benchmark's `library_build_type` does not affect it"};
inline constexpr Key parbench_version{"parbench_version", "-", "the program's version"};
inline constexpr Key parbench_commit{"parbench_commit", "-", "git commit the program was built from"};
inline constexpr Key device_kind{"device_kind", "-", "cpu or cuda", M::Always};
inline constexpr Key cpu_model{"cpu_model", "-", "the CPU's model name", M::Cpu};
inline constexpr Key cpu_threads{"cpu_threads", "count", "hardware threads of the machine", M::Cpu};
inline constexpr Key conv_backend{"conv_backend", "-", "CPU convolutions: oneDNN or im2col+gemm", M::Always};
inline constexpr Key gpu_count{"gpu_count", "count", "GPUs visible", M::Always};
inline constexpr Key gpu_names{"gpu_names", "-", "CUDA builds: each GPU's name, compute capability and memory", M::Always};
inline constexpr Key cuda_driver{"cuda_driver", "-", "CUDA builds: driver version", M::Always};
inline constexpr Key cuda_runtime{"cuda_runtime", "-", "CUDA builds: runtime version", M::Always};
inline constexpr Key cudnn{"cudnn", "-", "CUDA builds: cuDNN version", M::Always};
inline constexpr Key nccl{"nccl", "-", "CUDA builds: NCCL version, or not built", M::Always};
inline constexpr Key conv_search{"PARBENCH_CONV_SEARCH", "-", "the environment variable as set for the run, or unset", M::Always};
inline constexpr Key cpu_winograd{"PARBENCH_CPU_WINOGRAD", "-", "the environment variable as set for the run, or unset", M::Always};
inline constexpr Key precision{"precision", "-", "fp32 or tf32", M::Always};
inline constexpr Key scaling{"scaling", "-", "weak (batch per device fixed) or strong (global batch fixed)", M::Always};
inline constexpr Key batch{"batch", "samples", "the --batch value (per device under weak scaling, global under strong)"};
inline constexpr Key batch_meaning{"batch_meaning", "-", "per device or global"};
inline constexpr Key workload{"workload", "-", "the workload's name", M::Always};
inline constexpr Key workload_source{"workload_source", "-", "the --workload value (a name or a file)"};
inline constexpr Key workload_params{"workload_params", "-", "great_net: image size and width scale", M::Always};
inline constexpr Key input_shape{"input_shape", "-", "one sample's input shape", M::Always};
inline constexpr Key param_count{"param_count", "count", "parameters of the net", M::Always};
inline constexpr Key forward_flops_per_sample{"forward_flops_per_sample", "FLOP", "forward FLOPs per sample (multiply-add = 2)", M::Always};
inline constexpr Key strategies{"strategies", "-", "the strategies of the sweep, comma-separated"};
inline constexpr Key strategy_order{"strategy_order", "-", "every registered strategy in display order, comma-separated"};
inline constexpr Key single_device_strategies{"single_device_strategies", "-", "strategies that run on one device only, comma-separated"};
inline constexpr Key device_counts{"device_counts", "-", "the device counts of the sweep, comma-separated"};
inline constexpr Key warmup{"warmup", "steps", "untimed steps per configuration"};
inline constexpr Key iterations{"iterations", "steps", "timed steps per repetition, or auto (Google Benchmark decides)"};
inline constexpr Key threads_per_worker{"threads_per_worker", "count", "CPU threads per worker, or auto", M::Always};
inline constexpr Key micro_batches{"micro_batches", "count", "pipeline micro-batches: the --micro-batches value or min(4, global batch)", M::Always};
inline constexpr Key bucket_mb{"bucket_mb", "MiB", "ddp gradient bucket size", M::Always};
inline constexpr Key balance{"balance", "layers", "mp/pipeline layers per stage (only when given)", M::Always};
inline constexpr Key oversubscribe{"oversubscribe", "-", "true when workers may share GPUs", M::Always};
inline constexpr Key seed{"seed", "-", "seed for parameters and data"};
inline constexpr Key world_size{"world_size", "count", "processes (MPI ranks); 1 without MPI", M::Always};
inline constexpr Key hosts{"hosts", "-", "host of each rank, comma-separated"};
inline constexpr Key first_bucket_mb{"first_bucket_mb", "MiB", "ddp first gradient bucket size (the last layers')", M::Always};
inline constexpr Key grad_average{"grad_average", "-", "ddp gradient averaging: local (torch DDP's mean of local means; only when given, absent = global)", M::Always};
}  // namespace context

inline constexpr Key kContext[] = {
    context::timing, context::parbench_version, context::parbench_commit, context::device_kind,   context::cpu_model,
    context::cpu_threads,      context::conv_backend,    context::gpu_count,     context::gpu_names,
    context::cuda_driver,      context::cuda_runtime,    context::cudnn,         context::nccl,
    context::conv_search,      context::cpu_winograd,    context::precision,     context::scaling,
    context::batch,            context::batch_meaning,   context::workload,      context::workload_source,
    context::workload_params,  context::input_shape,     context::param_count,   context::forward_flops_per_sample,
    context::strategies,       context::strategy_order,  context::single_device_strategies,
    context::device_counts,    context::warmup,          context::iterations,    context::threads_per_worker,
    context::micro_batches,    context::bucket_mb,       context::balance,       context::oversubscribe,
    context::seed,             context::world_size,      context::hosts,
    context::first_bucket_mb,  context::grad_average};

// ---- the record's own top-level field ------------------------------------------------------
// {"<benchmark>": [[seconds of each iteration of repetition 0], [... repetition 1], ...]}
inline constexpr Key iteration_times{"iteration_times_s", "s", "every timed iteration's time, per benchmark and repetition"};

}  // namespace pb::reports::schema
