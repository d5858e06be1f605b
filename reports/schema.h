// The run-to-report contract: every counter and context key `parbench run` writes and reports/
// read, with its unit and meaning. Writer and readers use these names; docs/reports.md lists
// the same keys (a test checks it).
#pragma once

#include <string>

namespace pb::reports::schema {

// Whether two runs must agree on a context key to be compared (or tabulated together).
enum class Match {
  No,      // informative only
  Always,  // the environment, or what changes the work or the arithmetic
  Cpu,     // only when either run is a CPU run (there the CPU is the device)
  Gpu,     // only when either run is a CUDA run (the GPUs and CUDA libraries a CPU run never uses)
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
inline constexpr Key peak_bytes_max{"peak_bytes_max", "bytes", "peak allocated bytes (engine tensors and library workspace) since setup, the largest over the workers"};
inline constexpr Key peak_bytes_dev0{"peak_bytes_dev0", "bytes", "peak allocated bytes (engine tensors and library workspace) since setup on worker 0"};
inline constexpr Key bytes_sent_per_iter{"bytes_sent_per_iter", "bytes", "per iteration, summed over the workers: each worker's collective payloads (the nccl-tests size) and sent messages"};
inline constexpr Key skip_bytes_per_iter{"skip_bytes_per_iter", "bytes", "mp/pipeline over a net with skips: per iteration, summed over the stages: the bytes of skips sent (values other than a stage's output to the next stage, and their gradients)"};
inline constexpr Key transfer_s_max{"transfer_s_max", "s", "per iteration, the largest transfer time of a worker: the transfers alone (in-process: the copies, not the wait for peers; NCCL: the collectives' span on the GPU stream after every member arrived, and send/recv spans from the last peer's arrival where all ranks share the process; MPI: from the moment its peers arrived -- a barrier before each collective, MPI_Mprobe before a receive -- the copy of a message the receiver's)"};
inline constexpr Key compute_share{"compute_share", "fraction", "forward + backward + loss + optimizer time summed over the workers / (N x step time), mean over iterations"};
inline constexpr Key transfer_share{"transfer_share", "fraction", "transfer time summed over the workers / (N x step time), mean over iterations"};
inline constexpr Key idle_share{"idle_share", "fraction", "idle time (waiting for peers, its own device, or the step's slowest worker) summed over the workers / (N x step time), mean over iterations"};
inline constexpr Key other_share{"other_share", "fraction", "the remainder no span covers, summed over the workers / (N x step time), mean over iterations"};
inline constexpr Key exposed_comm_s{"exposed_comm_s", "s", "per iteration, the transfer time of the critical worker (the one idle least) not overlapped by its own compute spans"};
inline constexpr Key measured_bubble{"measured_bubble", "fraction", "mp/pipeline: idle time of the stage workers / (P x step time), mean over iterations"};
inline constexpr Key algbw_all_reduce{"algbw_all_reduce", "bytes/s", "all-reduce payload bytes / transfer time of the slowest rank, over the iterations"};
inline constexpr Key busbw_all_reduce{"busbw_all_reduce", "bytes/s", "algbw_all_reduce x 2(N-1)/N"};
inline constexpr Key algbw_broadcast{"algbw_broadcast", "bytes/s", "broadcast payload bytes / transfer time of the slowest rank, over the iterations"};
inline constexpr Key busbw_broadcast{"busbw_broadcast", "bytes/s", "algbw_broadcast x 1"};
inline constexpr Key algbw_reduce{"algbw_reduce", "bytes/s", "reduce payload bytes / transfer time of the slowest rank, over the iterations"};
inline constexpr Key busbw_reduce{"busbw_reduce", "bytes/s", "algbw_reduce x 1"};
inline constexpr Key algbw_send_recv{"algbw_send_recv", "bytes/s", "bytes of every message / the sum of their transfer times, over the iterations"};
inline constexpr Key busbw_send_recv{"busbw_send_recv", "bytes/s", "algbw_send_recv x 1"};
inline constexpr Key algbw_all_gather{"algbw_all_gather", "bytes/s", "all-gather output bytes / transfer time of the slowest rank, over the iterations"};
inline constexpr Key busbw_all_gather{"busbw_all_gather", "bytes/s", "algbw_all_gather x (N-1)/N"};
inline constexpr Key algbw_reduce_scatter{"algbw_reduce_scatter", "bytes/s", "reduce-scatter input bytes / transfer time of the slowest rank, over the iterations"};
inline constexpr Key busbw_reduce_scatter{"busbw_reduce_scatter", "bytes/s", "algbw_reduce_scatter x (N-1)/N"};
inline constexpr Key bubble_fraction{"bubble_fraction", "fraction", "the idle share of the step its schedule's formula gives for equal stages and free transfers: (P-1)/(M+P-1) for GPipe and 1F1B (mp is M = 1), the schedule's own for the others"};
inline constexpr Key micro_batches{"micro_batches", "count", "micro-batches the last step ran"};
inline constexpr Key workers_used{"workers_used", "count", "workers that got work (torch.chunk may give fewer chunks than devices)"};
inline constexpr Key oversubscribed{"oversubscribed", "0/1", "1 when workers share GPUs (--oversubscribe)"};
inline constexpr Key iter_cv{"iter_cv", "fraction", "CV of the iteration times within this repetition"};
inline constexpr Key device_peak_bytes{"device_peak_bytes", "bytes", "tensor_bytes + workspace_bytes + runtime_bytes: what the configuration needs of a device (CUDA: the GPU with the largest sum; CPU: the host, shared by the workers)"};
inline constexpr Key tensor_bytes{"tensor_bytes", "bytes", "the engine's tensors (parameters, gradients, Adam moments, activations, buffers) at the allocator's peak since setup (CUDA: that GPU's; CPU: summed over the workers)"};
inline constexpr Key workspace_bytes{"workspace_bytes", "bytes", "library workspace at the allocator's peak since setup: oneDNN scratch and reorder buffers, im2col, Winograd transforms, cuDNN workspace (CUDA: that GPU's; CPU: summed over the workers)"};
inline constexpr Key runtime_bytes{"runtime_bytes", "bytes", "after the timed steps, CUDA: this process's growth of the bytes in use on that GPU (cudaMemGetInfo) since before its first allocation there, less the allocator's -- cuDNN/cuBLAS handles, NCCL buffers, loaded kernels (not the CUDA context, nor other processes as long as theirs stays put); CPU: the process's resident memory (VmRSS) before its first configuration -- the program and its libraries, the same for every configuration (what earlier configurations leave resident would make it depend on the sweep's order)"};
inline constexpr Key worker_threads{"worker_threads", "count", "CPU: the threads each worker's backend runs (--threads, or the cores shared among the workers)"};
inline constexpr Key predicted_bytes{"predicted_bytes", "bytes", "the memory the plan it ran names (plan/memory.h): the engine's tensors and library workspace over all the workers, counted, not measured"};
inline constexpr Key allocated_bytes{"allocated_bytes", "bytes", "the allocators' peak since setup (tensors + workspace), summed over the workers and ranks: what predicted_bytes estimates"};
// How close to the hardware (bench/roofline.h: the peak's source is in the context).
inline constexpr Key mfu{"mfu", "fraction", "model FLOPs utilization: flop_per_s / peak_flop_per_s (absent when no peak is known; context roofline_source says why)"};
inline constexpr Key peak_flop_per_s{"peak_flop_per_s", "FLOP/s", "the configuration's hardware peak: context roofline_peak_flop_per_s x devices (CPU workers sharing the cores: x 1)"};
inline constexpr Key warmup_s{"warmup_s", "s", "the configuration's first step after its setup (the first untimed warm-up step; the first timed one under --warmup 0), from its start until the slowest worker is done, devices synchronized, as iterations are timed: one step plus first-call work (algorithm search, plan build, allocator growth)"};
// Spread and stragglers (reports/straggler.h): multi-worker rows.
inline constexpr Key iter_p50_s{"iter_p50_s", "s", "median of the iteration times within this repetition"};
inline constexpr Key iter_p99_s{"iter_p99_s", "s", "99th percentile of the iteration times within this repetition (interpolated)"};
inline constexpr Key straggler_ratio{"straggler_ratio", "ratio", "several workers: the slowest worker's median compute time per iteration / the median worker's"};
inline constexpr Key straggler_rank{"straggler_rank", "rank", "the worker (MPI rank) named as the straggler: more than 10% above the median worker's compute time and by more than its own iterations' standard deviation; absent when none"};
}  // namespace counter

inline constexpr Key kCounters[] = {
    counter::samples_per_s,  counter::flop_per_s,      counter::global_batch,        counter::devices,
    counter::peak_bytes_max, counter::peak_bytes_dev0, counter::bytes_sent_per_iter, counter::transfer_s_max,
    counter::skip_bytes_per_iter,
    counter::bubble_fraction, counter::micro_batches,  counter::workers_used,        counter::oversubscribed,
    counter::iter_cv,
    counter::compute_share, counter::transfer_share, counter::idle_share, counter::other_share,
    counter::exposed_comm_s, counter::measured_bubble,
    counter::algbw_all_reduce, counter::busbw_all_reduce, counter::algbw_broadcast, counter::busbw_broadcast,
    counter::algbw_reduce, counter::busbw_reduce, counter::algbw_send_recv, counter::busbw_send_recv,
    counter::algbw_all_gather, counter::busbw_all_gather, counter::algbw_reduce_scatter, counter::busbw_reduce_scatter,
    counter::device_peak_bytes, counter::tensor_bytes, counter::workspace_bytes, counter::runtime_bytes,
    counter::worker_threads, counter::predicted_bytes, counter::allocated_bytes,
    counter::mfu, counter::peak_flop_per_s, counter::warmup_s,
    // spread and stragglers
    counter::iter_p50_s, counter::iter_p99_s, counter::straggler_ratio, counter::straggler_rank};

// ---- figures: what reports print, one name (CSV and JSON), one heading, one unit each --------
inline constexpr double kMiB = 1024.0 * 1024.0;  // every memory figure is in MiB (2^20 bytes)
struct Figure {
  const char* name;     // CSV column and JSON field
  const char* heading;  // table column and printed label
  const char* unit;
  const char* meaning;
};
namespace figure {
inline constexpr Figure device_peak{"device_peak_mib", "peak MiB/device", "MiB", "device_peak_bytes: what the configuration needs of a device (tensors + workspace + runtime)"};
inline constexpr Figure allocated_worker_max{"allocated_mib_worker_max", "allocated MiB/worker (peak)", "MiB", "peak_bytes_max: the allocator's peak of the worker with the most"};
inline constexpr Figure allocated_worker0{"allocated_mib_worker0", "allocated MiB of worker 0 (peak)", "MiB", "peak_bytes_dev0"};
inline constexpr Figure predicted{"predicted_mib", "predicted MiB", "MiB", "predicted_bytes: the estimate of all the workers' allocations, before the run"};
inline constexpr Figure allocated{"allocated_mib", "allocated MiB", "MiB", "allocated_bytes: all the workers' allocator peaks, summed (what the estimate predicts)"};
inline constexpr Figure predicted_error{"predicted_error", "error", "fraction", "(predicted - allocated) / allocated"};
inline constexpr Figure threads{"threads_per_worker", "threads/worker", "count", "worker_threads"};
// A row's identity, so rows of several runs stay apart: which benchmark, with which work, from which record.
inline constexpr Figure benchmark{"benchmark", "benchmark", "-", "the benchmark's identity: workload[/param:value...]/strategy/devices:N/batch:B[/option:value...]"};
inline constexpr Figure workload_params{"workload_params", "workload parameters", "-", "context workload_params (great_net: image and width), else the parameters in the benchmark's name"};
inline constexpr Figure run{"run", "run", "-", "the record(s) the row's repetitions came from, as given (run/results.json); CSV: ';'-separated, JSON: a list"};
}  // namespace figure
inline constexpr Figure kFigures[] = {figure::device_peak, figure::allocated_worker_max, figure::allocated_worker0,
                                      figure::predicted,   figure::allocated,            figure::predicted_error,
                                      figure::threads,     figure::benchmark,            figure::workload_params,
                                      figure::run};

inline bool is_counter(const std::string& name) {
  for (const Key& k : kCounters)
    if (name == k.name) return true;
  return false;
}

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
inline constexpr Key gpu_count{"gpu_count", "count", "GPUs visible", M::Gpu};
inline constexpr Key gpu_names{"gpu_names", "-", "CUDA builds: each GPU's name, compute capability and memory", M::Gpu};
inline constexpr Key cuda_driver{"cuda_driver", "-", "CUDA builds: driver version", M::Gpu};
inline constexpr Key cuda_runtime{"cuda_runtime", "-", "CUDA builds: runtime version", M::Gpu};
inline constexpr Key cudnn{"cudnn", "-", "CUDA builds: cuDNN version", M::Gpu};
inline constexpr Key nccl{"nccl", "-", "CUDA builds: NCCL version, or not built", M::Gpu};
inline constexpr Key conv_search{"PARBENCH_CONV_SEARCH", "-", "the environment variable as set for the run, or unset", M::Gpu};
inline constexpr Key cpu_winograd{"PARBENCH_CPU_WINOGRAD", "-", "the environment variable as set for the run, or unset", M::Always};
inline constexpr Key cudnn_api{"PARBENCH_CUDNN_API", "-", "the environment variable as set for the run, or unset", M::Gpu};
inline constexpr Key conv_workspace_policy{"conv_workspace_policy", "-", "CUDA: fastest-fits (no cap: each convolution direction runs the fastest algorithm whose workspace the GPU can give) or cap N MiB (--conv-workspace-mib); CPU: n/a", M::Gpu};
inline constexpr Key conv_layout{"conv_layout", "-", "CUDA: nchw, or nhwc (--layout: activations between consecutive convolutions, and their gradients, NHWC; filters KRSC per call); CPU: n/a. Absent (runs before it): nchw", M::Gpu};
inline constexpr Key conv_layers{"conv_layers", "-", "CUDA: each convolution layer alone on GPU 0 at the run's one-device batch, before the sweep: its library workspace in bytes and each direction's cuDNN engine or algorithm and workspace; one 'layer N: ...' entry per layer, joined by ' / '; CPU: n/a (oneDNN chooses no algorithm by workspace, and a probe there would leave its caches to the configurations after it)"};
inline constexpr Key precision{"precision", "-", "fp32, tf32 or bf16", M::Always};
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
inline constexpr Key balance{"balance", "layers", "mp/pipeline --balance: layers per stage, time or seed (only when given)", M::Always};
inline constexpr Key oversubscribe{"oversubscribe", "-", "true when workers may share GPUs", M::Always};
inline constexpr Key seed{"seed", "-", "seed for parameters and data"};
inline constexpr Key world_size{"world_size", "count", "processes (MPI ranks); 1 without MPI", M::Always};
inline constexpr Key hosts{"hosts", "-", "host of each rank, comma-separated"};
inline constexpr Key schedule{"schedule", "-", "pipeline schedule: the --schedule value (gpipe or 1f1b), or per strategy (pipeline: gpipe, pipeline-1f1b: 1f1b)"};
inline constexpr Key recompute{"recompute", "-", "true with --recompute, else per strategy (the -recompute pipelines recompute)"};
inline constexpr Key first_bucket_mb{"first_bucket_mb", "MiB", "ddp first gradient bucket size (the last layers')", M::Always};
inline constexpr Key grad_average{"grad_average", "-", "ddp gradient averaging: local (torch DDP's mean of local means; only when given, absent = global)", M::Always};
inline constexpr Key reduce_dtype{"reduce_dtype", "-", "--reduce-dtype: the dtype gradients are reduced in (only when bf16, absent = fp32)", M::Always};
inline constexpr Key param_dtype{"param_dtype", "-", "--param-dtype: the dtype fsdp/zero2/hsdp gather parameters in (only when bf16, absent = fp32)", M::Always};
inline constexpr Key virtual_stages{"virtual_stages", "count", "pipeline-interleaved --virtual-stages: model chunks per worker (only when not 2, absent = 2)", M::Always};
// The roofline of mfu and of the trace's per-span fractions (bench/roofline.h).
inline constexpr Key roofline_peak{"roofline_peak_flop_per_s", "FLOP/s", "one device's dense peak in the run's precision (CPU: the measured effective rate of all cores, which the workers share); absent when unknown"};
inline constexpr Key roofline_bandwidth{"roofline_bytes_per_s", "bytes/s", "one device's memory bandwidth for rooflines (read + write bytes per second); absent when unknown"};
inline constexpr Key roofline_scope{"roofline_scope", "-", "per device (N devices: N x the peak) or shared (CPU: every worker shares the cores' one peak)"};
inline constexpr Key roofline_source{"roofline_source", "-", "where the peak and bandwidth come from (machine file, datasheet table, measured), or why there are none"};
inline constexpr Key warmup_timing{"warmup_timing", "-", "what counter warmup_s covers"};
}  // namespace context

inline constexpr Key kContext[] = {
    context::timing, context::parbench_version, context::parbench_commit, context::device_kind,   context::cpu_model,
    context::cpu_threads,      context::conv_backend,    context::gpu_count,     context::gpu_names,
    context::cuda_driver,      context::cuda_runtime,    context::cudnn,         context::nccl,
    context::conv_search,      context::cpu_winograd,    context::cudnn_api,     context::conv_workspace_policy,
    context::conv_layout,      context::conv_layers,
    context::precision,        context::scaling,
    context::batch,            context::batch_meaning,   context::workload,      context::workload_source,
    context::workload_params,  context::input_shape,     context::param_count,   context::forward_flops_per_sample,
    context::strategies,       context::strategy_order,  context::single_device_strategies,
    context::device_counts,    context::warmup,          context::iterations,    context::threads_per_worker,
    context::micro_batches,    context::bucket_mb,       context::balance,       context::oversubscribe,
    context::seed,             context::world_size,      context::hosts,
    context::schedule,         context::recompute,
    context::first_bucket_mb,  context::grad_average,    context::reduce_dtype,  context::param_dtype,
    context::virtual_stages,
    context::roofline_peak, context::roofline_bandwidth, context::roofline_scope, context::roofline_source,
    context::warmup_timing};

// ---- the record's own top-level field ------------------------------------------------------
// {"<benchmark>": [[seconds of each iteration of repetition 0], [... repetition 1], ...]}
inline constexpr Key iteration_times{"iteration_times_s", "s", "every timed iteration's time, per benchmark and repetition"};
// {"<benchmark>": {"stages": [[begin, end), ...] (mp/pipeline), "buckets": [{"layers": [first, last],
// "floats": [begin, end)}, ...] (ddp, in all-reduce order)}}
inline constexpr Key layout{"layout", "-", "per benchmark: the stages' layer ranges (mp, pipeline), over a net with skips each stage's skip bytes sent per step (skip_bytes), and ddp's gradient buckets"};

}  // namespace pb::reports::schema
