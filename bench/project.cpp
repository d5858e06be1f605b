// parbench project: every strategy projected to device counts and machines one does not have,
// from a per-layer profile and a machine description; --validate predicts a measured run's
// configurations and prints the errors (bench/project_validate.cpp). The model is projection/.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include <fmt/ranges.h>

#include "bench/cli.h"
#include "bench/project.h"
#include "engine/check.h"
#include "engine/fsutil.h"
#include "projection/plan_price.h"
#include "reports/projection_table.h"
#include "reports/table.h"
#include "strategies/plan_gen.h"
#include "strategies/sweep.h"

namespace pb {

namespace pj = projection;
using nlohmann::json;
using pj::Projected;

std::vector<std::string> split_list(const std::string& s) { return reports::split_commas(s); }

const pj::Profile& profile_for(const std::vector<pj::Profile>& ps, int threads, int concurrent) {
  for (const pj::Profile& p : ps)
    if (p.threads == threads && p.concurrent == concurrent) return p;
  for (const pj::Profile& p : ps)
    if (p.threads == threads) return p;
  if (ps.size() == 1) return ps.front();
  std::vector<int> have;
  for (const pj::Profile& p : ps) have.push_back(p.threads);
  throw UsageError(fmt::format("--profile: no profile measured with {} thread(s) per worker (the profiles have {})",
                               threads, fmt::join(have, ", ")));
}

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

std::vector<int64_t> int_items(const std::string& flag, const std::string& s, int64_t lo) {
  std::vector<int64_t> out;
  for (const std::string& item : split_list(s)) {
    std::size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || used == 0 || v < lo)
      throw UsageError(fmt::format("flag --{} expects a comma-separated list of integers >= {}, got '{}'", flag, lo, s));
    check_int_flag(flag, v, s);
    out.push_back(v);
  }
  return out;
}

// --scale-image FROM:TO applied to every profile; the note the table's header says of it.
std::string scale_images(const Flags& f, std::vector<pj::Profile>& profiles) {
  if (!f.has("scale-image")) return "";
  long from = 0, to = 0;
  char tail = 0;
  if (std::sscanf(f.str("scale-image").c_str(), "%ld:%ld%c", &from, &to, &tail) != 2 || from < 1 || to < 1)
    throw UsageError(fmt::format("--scale-image expects FROM:TO, two image sizes in pixels, got '{}'", f.str("scale-image")));
  for (pj::Profile& p : profiles) p = pj::scale_image(p, from, to);
  return fmt::format(" Layer times scaled from {0}x{0} to {1}x{1} images (x{2:g}, proportional to pixels).", from, to,
                     static_cast<double>(to) * to / (static_cast<double>(from) * from));
}

// How the profile's compute times are taken to --machine and --precision: the factor, the
// sentence the header says, the words the chart's title says, and (`unscaled`) the refusal of a
// profile from another kind of device given no way to scale it.
struct ComputeScale {
  double factor = 1;
  std::string have, want;  // the profile's precision and the one priced
  std::string note, scaled, unscaled;
};

ComputeScale compute_scale(const Flags& f, const pj::Machine& m, const std::vector<pj::Profile>& profiles) {
  ComputeScale cs;
  // Precision: the profile's, or another one only on purpose, by the peaks of the two.
  const std::string have = profiles.front().precision, want = f.has("precision") ? f.str("precision") : have;
  cs.have = have, cs.want = want;
  if (want != "fp32" && want != "tf32" && want != "bf16")
    throw UsageError(fmt::format("--precision expects fp32, tf32 or bf16, got '{}'", want));
  for (const pj::Profile& p : profiles)
    if (p.precision != have)
      throw UsageError(fmt::format("--profile: {} was timed in {} and {} in {}: give profiles of one precision",
                                   profiles.front().source, have, p.source, p.precision));
  const bool cross = want != have;
  if (cross && !f.on("scale-precision"))
    throw UsageError(fmt::format("--precision {}: --profile {} was timed in {}; give a {} profile (parbench profile --precision {}), "
                                 "or --scale-precision to scale its compute times by the machines' {} over {} peaks",
                                 want, profiles.front().source, have, want, want, have, want));
  if (!cross && f.on("scale-precision"))
    throw UsageError(fmt::format("--scale-precision: --profile {} is already {} (nothing to scale)", profiles.front().source, want));
  const std::string cross_note = cross ? fmt::format(", {} scaled from {} by peaks", want, have) : "";
  if (f.has("from-machine") && f.has("from-profile-peak"))
    throw UsageError("--from-machine and --from-profile-peak both scale compute times: give one");
  if (f.has("from-machine")) {
    const pj::Machine from = pj::load_machine(f.str("from-machine"), unit_classes());
    cs.factor = from.peak(have) / m.peak(want);
    cs.note = fmt::format("Compute times scaled from {} ({:.3g} TFLOP/s {}) to {} ({:.3g} TFLOP/s {}): x{:.3g}.", from.name,
                          from.peak(have) / 1e12, have, m.name, m.peak(want) / 1e12, want, cs.factor);
    cs.scaled = fmt::format("compute x{:.3g} from {} (--from-machine{})", cs.factor, from.name, cross_note);
  } else if (f.has("from-profile-peak")) {
    const double frac = f.number("from-profile-peak");
    if (!(frac > 0 && frac <= 1)) throw UsageError(fmt::format("--from-profile-peak expects a fraction in (0, 1], got {}", frac));
    const double best = profiles.front().best_forward_flops_per_s();
    if (!(best > 0)) throw UsageError(fmt::format("--from-profile-peak: {} has no layer with FLOPs and time", profiles.front().source));
    cs.factor = best / (frac * m.peak(want));
    cs.note = fmt::format("Compute times scaled so that the profile's fastest layer ({:.3g} GFLOP/s forward on {}, {}) runs at {:g}% of "
                          "{}'s {} peak ({:.3g} TFLOP/s); every other layer keeps its speed relative to it: x{:.3g}.",
                          best / 1e9, profiles.front().device_kind.empty() ? "its device" : profiles.front().device_kind, have,
                          frac * 100, m.name, want, m.peak(want) / 1e12, cs.factor);
    cs.scaled = fmt::format("compute x{:.3g}, fastest layer at {:g}% of {} peak (--from-profile-peak{})", cs.factor, frac * 100,
                            want, cross_note);
  } else if (const std::string& pk = profiles.front().device_kind; pk.substr(0, pk.find(':')) != m.kind) {
    // Times measured on one kind of device say nothing of another's speed: unscaled, a CPU
    // profile "on H200" runs at the CPU's pace. Refused once the other flags are checked.
    cs.unscaled = fmt::format(
        "--profile {} was measured on {} and --machine {} describes {} devices: give --from-machine FILE (the machine "
        "the profile was measured on) or --from-profile-peak FRACTION to scale its compute times",
        profiles.front().source, profiles.front().device_kind.empty() ? "a device it does not record" : profiles.front().device_kind,
        m.source, m.kind);
  } else if (cross) {
    cs.factor = m.peak(have) / m.peak(want);
    cs.note = fmt::format("Compute times scaled from {} to {} by {}'s peaks ({:.3g} and {:.3g} TFLOP/s): x{:.3g}.", have, want,
                          m.name, m.peak(have) / 1e12, m.peak(want) / 1e12, cs.factor);
    cs.scaled = fmt::format("compute x{:.3g} from the profile's {} speed (--scale-precision)", cs.factor, have);
  } else {
    cs.scaled = fmt::format("compute at the profile's measured {} speed", m.kind);
  }
  return cs;
}

// What the sweep is asked for: batches, device counts, strategies and their options, scaling.
struct Asked {
  std::vector<int64_t> batches, devices;
  std::vector<std::string> strategies;
  pj::Sweep sweep;
  double first_bucket_bytes = 0;
  std::string scaling;
};

Asked asked_for(const Flags& f, const pj::Machine& m) {
  Asked a;
  a.batches = int_items("batch", f.str("batch"), 1);
  if (a.batches.empty()) throw UsageError("--batch needs at least one batch size");
  if (f.has("devices")) {
    a.devices = int_items("devices", f.str("devices"), 1);
  } else {
    for (int64_t d : {1, 2, 4, 8, 64, 1024})
      if (d <= m.total_devices()) a.devices.push_back(d);
    if (a.devices.back() != m.total_devices()) a.devices.push_back(m.total_devices());
  }
  const std::vector<std::string>& modelled = pj::modelled_strategies();
  a.strategies = f.str("strategies") == "all" ? modelled : split_list(f.str("strategies"));
  for (const std::string& s : a.strategies)
    if (!pj::is_modelled(s))
      throw UsageError(fmt::format("--strategies: no projection model for '{}': expected all or some of {}", s,
                                   fmt::join(modelled, ", ")));
  const std::vector<int64_t> micro = int_items("micro-batches", f.str("micro-batches"), 1);
  std::vector<std::string> schedules = split_list(f.str("schedules"));
  for (const std::string& s : schedules)
    if (Schedule sc; !parse_schedule(s, &sc))
      throw UsageError(fmt::format("--schedules: expected {}, got '{}'", fmt::join(schedule_names(), " and/or "), s));
  std::vector<double> buckets;
  for (const std::string& s : split_list(f.str("bucket-mb"))) {
    double v = 0;
    try {
      v = std::stod(s);
    } catch (const std::exception&) {
      v = -1;
    }
    if (!(v > 0) || !std::isfinite(v)) throw UsageError(fmt::format("--bucket-mb expects sizes in MiB > 0, got '{}'", s));
    buckets.push_back(v * kMiB);
  }
  a.sweep = pj::Sweep{micro, schedules, buckets, f.on("recompute")};
  const double first_mb = f.number("first-bucket-mb");
  if (!(first_mb > 0) || !std::isfinite(first_mb)) throw UsageError(fmt::format("--first-bucket-mb expects a size in MiB > 0, got {}", first_mb));
  a.first_bucket_bytes = first_mb * kMiB;
  a.scaling = f.str("scaling");
  if (a.scaling != "weak" && a.scaling != "strong" && a.scaling != "both")
    throw UsageError(fmt::format("--scaling expects weak, strong or both, got '{}'", a.scaling));
  const std::string format = f.str("format");
  if (format != "markdown" && format != "json") throw UsageError(fmt::format("--format expects markdown or json, got '{}'", format));
  return a;
}

struct Dtypes {
  std::string reduce, param;  // --reduce-dtype, --param-dtype
};

// --plan FILE alone, priced as written once it is of the profile's net and computes what its
// strategy computes there; one that cannot be priced is an error (it is all that was asked).
Projected project_plan_file(const Flags& f, const pj::Machine& m, const std::vector<pj::Profile>& profiles,
                            const pj::Options& o, const std::shared_ptr<const Plan>& user, const Dtypes& dt) {
  pj::Config c;
  c.strategy = user->strategy;
  c.devices = user->workers;
  c.global_batch = user->batch;
  c.micro_batches = user->micro_batches;
  c.reduce_dtype = dt.reduce, c.param_dtype = dt.param;  // the plan's, as its identity is checked
  c.plan = user;
  pj::Options oc = o;
  oc.threads_per_worker = m.threads_per_worker(c.devices, o.threads_per_worker);
  Projected pr;
  pr.scaling = "strong";
  pr.batch = user->batch;
  const std::string source = "--plan " + f.str("plan");
  const pj::Profile& prof = profiles.front();
  // The parts of a plan's identity a profile knows: its net's shapes and size and the dtypes
  // priced (the shapes not under --scale-image: its scaled shapes are the profile's, rounded).
  std::vector<std::pair<std::string, std::string>> want = {{"layers", std::to_string(prof.layers.size())},
                                                           {"params", std::to_string(prof.param_count())},
                                                           {"precision", prof.precision},
                                                           {"reduce_dtype", dt.reduce},
                                                           {"param_dtype", dt.param}};
  if (!f.has("scale-image") && !prof.layers.empty()) {
    std::vector<LayerSignature> layers;
    for (const pj::LayerProfile& l : prof.layers) layers.push_back({l.type, l.in, l.out, l.params});
    want.push_back({"input", shape_str(prof.layers.front().in)});
    want.push_back({"shapes", shapes_digest(layers)});
  }
  check_plan_identity(*user, want, source);
  std::size_t actions = 0;
  for (const auto& list : user->actions) actions += list.size();
  if (actions == 0) throw UsageError(fmt::format("{}: the plan has no actions: nothing to project", source));
  // What its strategy computes at its workers, batch and micro-batches, on the profile's net:
  // the plan must compute the same (its samples adding up to its batch, its strategy its own),
  // or its price is another step's.
  pj::Config own = c;
  own.plan = nullptr;
  own.virtual_stages = static_cast<int>(f.integer("virtual-stages"));
  Plan made;
  try {
    made = make_plan(user->strategy, pj::net_of(prof), pj::options_of(own, &prof), user->batch);
  } catch (const UsageError& e) {
    throw UsageError(fmt::format("{}: strategy {} makes no step of this plan's shape: {}", source, user->strategy, e.what()));
  }
  check_plan_computes(*user, made, source);
  pr.rows.push_back(pj::predict(profile_for(profiles, m.shared_cores > 0 ? oc.threads_per_worker : prof.threads), m, c, oc));
  if (!pr.rows.back().feasible) throw UsageError(fmt::format("{}: cannot be projected: {}", source, pr.rows.back().reason));
  return pr;
}

// Every configuration of every strategy asked for, per batch and scaling mode: a table each. A
// strategy asked for by name that no device count or batch can run says why, not an empty table.
std::vector<Projected> project_sweep(const Flags& f, const pj::Machine& m, const std::vector<pj::Profile>& profiles,
                                     const pj::Options& o, const Asked& a, const Dtypes& dt) {
  std::vector<Projected> all;
  std::map<std::string, int> made;  // configurations per --strategies entry
  const int virtual_stages = static_cast<int>(f.integer("virtual-stages"));  // at least 2 (bench/cli_ranges.cpp)
  for (const int64_t batch : a.batches) {
    for (const std::string& mode : {std::string("weak"), std::string("strong")}) {
      if (a.scaling != "both" && a.scaling != mode) continue;
      Projected pr;
      pr.scaling = mode;
      pr.batch = batch;
      for (int64_t d : a.devices) {
        const int64_t global = mode == "weak" ? batch * d : batch;
        for (const std::string& s : a.strategies)
          for (pj::Config c : pj::configurations(s, static_cast<int>(d), global, a.sweep)) {
            c.first_bucket_bytes = a.first_bucket_bytes;
            c.reduce_dtype = dt.reduce, c.param_dtype = dt.param;
            c.virtual_stages = virtual_stages;
            pj::set_balance(c, f.str("balance"), "--balance");
            const int t = m.threads_per_worker(c.devices, o.threads_per_worker);
            pj::Options oc = o;
            oc.threads_per_worker = t;
            pr.rows.push_back(pj::predict(profile_for(profiles, m.shared_cores > 0 ? t : profiles.front().threads), m, c, oc));
            ++made[s];
          }
      }
      all.push_back(std::move(pr));
    }
  }
  if (f.str("strategies") != "all")
    for (const std::string& s : a.strategies)
      if (!made[s]) throw UsageError(pj::no_configuration(s, a.devices, a.sweep.micro_batches));
  return all;
}

// The tables as markdown or JSON on stdout, and with --out PREFIX in PREFIX.md, .json and .png.
void write_projection(const Flags& f, const pj::Machine& m, const pj::Profile& p0, const std::vector<Projected>& all,
                      const pj::Options& o, const ComputeScale& cs, const std::string& image_note) {
  reports::Report full, chart;
  full.sources = chart.sources = {p0.source, m.source};
  for (const Projected& pr : all) {
    full.groups.push_back(pj::as_report_group(pr, p0, m, false, cs.scaled));
    chart.groups.push_back(pj::as_report_group(pr, p0, m, true, cs.scaled));
  }
  std::string md = fmt::format("# Projected, not measured: {} on {}, {}\n\nProfile {} ({}); machine {}{}. {}\n\n", p0.context.value("workload", std::string("profile")),
                               m.name, cs.want, p0.source, p0.device_kind.empty() ? "device not recorded" : p0.device_kind, m.source,
                               m.description.empty() ? "" : " (" + m.description + ")", cs.note + image_note);
  md += pj::projected_markdown(full);
  for (const Projected& pr : all) md += pj::parts_markdown(pr, m);
  md += pj::best_markdown(all);
  json doc = {{"parbench_projection", 1}, {"projected", true}, {"profile", p0.source}, {"machine", pj::machine_json(m)},
              {"compute_scale", o.compute_scale}, {"precision", cs.want},
              {"profile_precision", cs.have}, {"groups", json::array()}};
  for (const Projected& pr : all) {
    json g = {{"scaling", pr.scaling}, {"batch", pr.batch}, {"rows", json::array()}};
    for (const pj::Prediction& r : pr.rows) g["rows"].push_back(pj::prediction_json(r));
    doc["groups"].push_back(g);
  }
  doc["report"] = json::parse(reports::report_json(full));
  std::fputs((f.str("format") == "json" ? doc.dump(2) + "\n" : md).c_str(), stdout);
  std::fflush(stdout);
  if (!f.has("out")) return;
  const std::string prefix = f.str("out");
  make_dirs(std::filesystem::path(prefix).parent_path().string());
  write_file_atomic(prefix + ".md", md);
  write_file_atomic(prefix + ".json", doc.dump(2) + "\n");
  const std::string chart_json =
      (std::filesystem::temp_directory_path() / fmt::format("parbench-project-{}.json", ::getpid())).string();
  write_file_atomic(chart_json, reports::report_json(chart));
  const bool png = render_chart(chart_json, prefix + ".png");
  std::remove(chart_json.c_str());
  fmt::print(stderr, "parbench project: wrote {0}.md, {0}.json{1}\n", prefix, png ? fmt::format(", {}.png", prefix) : "");
}

}  // namespace

int cmd_project(const std::vector<std::string>& args) {
  Flags f("parbench project",
          "Projects every strategy to device counts and machines you do not have, from a per-layer profile\n"
          "(profile.json) and a machine description (machines/*.json): per strategy and device count the\n"
          "step time and its parts (compute, exposed communication, idle/bubble), peak memory per device and\n"
          "whether it fits, throughput and scaling efficiency, weak and strong scaling, and the best strategy\n"
          "per device count. Every figure is a projection, marked as such. Model: docs/projection.md.\n"
          "--validate RUN/results.json predicts a measured run's configurations instead and prints predicted\n"
          "against measured with the mean and worst absolute error (without --profile it times the run's\n"
          "workload here, layer by layer). --combine pools several such validations, each a run measured\n"
          "and validated in turn, so that a machine whose speed wanders touches runs and profiles alike.\n"
          "usage: parbench project --profile P.json --machine M.json [flags]\n"
          "       parbench project --validate RUN/results.json --machine M.json [--profile P.json]\n"
          "       parbench project --combine V1.json,V2.json,...",
          {
              {"profile", "FILE[,FILE]", "profile.json file(s); several: one per CPU thread count", ""},
              {"machine", "FILE", "machine description (machines/*.json)", ""},
              {"from-machine", "FILE", "the machine the profile was measured on: compute times scale by its peak FLOP/s over --machine's (this or --from-profile-peak is needed when the profile's device kind is not --machine's)", ""},
              {"scale-image", "FROM:TO", "project the net at TO-pixel images from a profile at FROM (times x (TO/FROM)^2; conv nets)", ""},
              {"precision", "P", "fp32, tf32 or bf16: the precision to price compute in (default: the profile's, context.precision; fp32 when not recorded)", ""},
              {"scale-precision", "", "project a profile timed in one precision to --precision: compute times scale by the machines' peaks of the two (device.peak_flops_by_precision), labelled as scaled", ""},
              {"from-profile-peak", "FRACTION", "scale compute times so that the profile's fastest layer runs at FRACTION of --machine's peak (a profile from another device)", ""},
              {"devices", "LIST", "device counts (default: 1,2,4,8,64,1024 up to the machine's devices)", ""},
              {"batch", "LIST", "batch per device (weak scaling) or global batch (strong scaling); several: a table each", "1"},
              {"scaling", "MODE", "weak, strong or both", "both"},
              {"strategies", "LIST", "strategies to project, or all (regular,dp,ddp,mp,pipeline,fsdp,zero2,tp,dpxpp,dpxtp; dpxpp / dpxtp: every dp<D>xpp<P> / dp<D>xtp<T> with D x P = N, both >= 2; or one such name; or a pipeline variant by run's name, pipeline-1f1b, pipeline-recompute, pipeline-1f1b-recompute: its schedule and recompute, whatever --schedules and --recompute say)", "all"},
              {"micro-batches", "LIST", "pipeline and dp<D>xpp<P> (per replica) micro-batch counts (those above the batch, and for pipeline-interleaved those not a multiple of the device count, are left out; a strategy named with none left is refused)", "2,4,8,16"},
              {"schedules", "LIST", "pipeline schedules: gpipe, 1f1b", "gpipe,1f1b"},
              {"bucket-mb", "LIST", "ddp bucket sizes in MiB", "1,25"},
              {"plan", "FILE", "project this plan file (JSON, as parbench plan --format json writes; validated first) at its workers, batch and micro-batches instead of --strategies", ""},
              {"first-bucket-mb", "MB", "ddp: the first bucket's size (the last layers') in MiB, as run's", "1"},
              {"virtual-stages", "V", "pipeline-interleaved: model chunks per worker (the net in V x P stages), as run's, at least 2", "2"},
              {"reduce-dtype", "D", "fp32 or bf16: the dtype gradients are reduced in, as run's (priced at its bytes; strategies that reduce none unchanged)", "fp32"},
              {"param-dtype", "D", "fp32 or bf16: the dtype fsdp, zero2 and hsdp gather parameters in, as run's (bf16 needs --precision bf16)", "fp32"},
              {"balance", "L1,L2,..|time|seed", "mp/pipeline/dp<D>xpp<P>: the stages as run's --balance (time: by the profile's layer times; default: by FLOPs)", ""},
              {"recompute", "", "also the pipeline variants that recompute stage activations in backward", ""},
              {"threads", "N", "CPU threads per worker (0: the cores shared among the workers, as run does)", "0"},
              {"format", "FMT", "what to print: markdown or json", "markdown"},
              {"out", "PREFIX", "write PREFIX.md, PREFIX.json and PREFIX.png (chart)", ""},
              {"validate", "RUN.json", "a run's results.json: predict its configurations and print the errors", ""},
              {"save-profile", "PREFIX", "--validate without --profile: also write the timed profiles to PREFIX-threadsT-workersK.json (pipelines' stage by stage: PREFIX-stagesS-threadsT-workersK.json; fsdp's and zero2's layer by layer: PREFIX-layers1-threadsT-workersK.json; tp's and dp x tp's with N channel slices: PREFIX-tpN-threadsT-workersK.json)", ""},
              {"load-profile", "PREFIX", "--validate: the profiles an earlier --save-profile PREFIX wrote, instead of timing them (a measurement predicted again)", ""},
              {"combine", "V1,V2,...", "pool validations written by --validate --out (each a run and its profile, timed in turn): measured = the median of their measured times, predicted = measured x the median of their predicted / measured", ""},
              {"anchor", "", "--validate: scale every prediction by the one-device regular run's measured over predicted time (the machine's speed drifting between the run and the profile) and leave that row out of the errors", ""},
              {"reps", "N", "--validate without --profile: timed repetitions per batch size (median; with workers side by side their mean, at the slowest one's pace)", "3"},
              {"profile-rounds", "N", "--validate without --profile: time everything N times in turn and take each layer's median", "3"},
          });
  if (!f.parse(args)) return 0;
  if (!f.positional().empty()) throw UsageError(fmt::format("unexpected argument '{}'", f.positional()[0]));
  if (f.has("combine")) {
    for (const char* other : {"validate", "profile", "machine", "anchor"})
      if (f.has(other)) throw UsageError(fmt::format("--combine pools validation files already written; --{} does not apply", other));
    return project_combine(f);
  }
  if (!f.has("machine")) throw UsageError("--machine FILE is required (machines/*.json, or one written by parbench calibrate)");
  const pj::Machine m = pj::load_machine(f.str("machine"), unit_classes());
  std::vector<pj::Profile> profiles;
  for (const std::string& path : split_list(f.str("profile"))) profiles.push_back(pj::load_profile(path));
  if (f.integer("reps") < 1) throw UsageError("--reps must be at least 1");
  if (f.integer("profile-rounds") < 1) throw UsageError("--profile-rounds must be at least 1");
  if (f.has("load-profile")) {
    if (!f.has("validate")) throw UsageError("--load-profile goes with --validate (the profiles a validation saved)");
    for (const char* other : {"profile", "save-profile"})
      if (f.has(other)) throw UsageError(fmt::format("--load-profile reads the profiles to use; --{} does not apply", other));
  }
  if (f.has("validate")) {
    for (const char* other : {"precision", "scale-precision", "reduce-dtype", "param-dtype"})
      if (f.has(other))
        throw UsageError(fmt::format("--validate predicts the run as it ran, in the precision and dtypes its context records; "
                                     "--{} does not apply", other));
    return project_validate(f, m, profiles);
  }
  if (profiles.empty()) throw UsageError("--profile FILE is required (a profile.json; see parbench project --help)");
  const std::string image_note = scale_images(f, profiles);
  pj::Options o;
  o.threads_per_worker = static_cast<int>(f.integer("threads"));
  if (o.threads_per_worker < 0) throw UsageError("--threads must be >= 0");
  const ComputeScale cs = compute_scale(f, m, profiles);
  o.compute_scale = cs.factor;
  for (pj::Profile& p : profiles) p.precision = cs.want;  // what is priced: memory and titles follow
  const Asked asked = asked_for(f, m);
  if (!cs.unscaled.empty()) throw UsageError(cs.unscaled);

  Dtypes dt{dtype_label(parse_dtype_label(f.str("reduce-dtype"), "--reduce-dtype")),
            dtype_label(parse_dtype_label(f.str("param-dtype"), "--param-dtype"))};
  const std::shared_ptr<const Plan> user = user_plan(
      f, {"strategies", "devices", "batch", "scaling", "micro-batches", "schedules", "bucket-mb", "first-bucket-mb", "recompute", "balance",
          "virtual-stages"});
  std::vector<Projected> all;
  if (user) all.push_back(project_plan_file(f, m, profiles, o, user, dt));
  if (dt.param == "bf16" && profiles.front().precision != "bf16")
    throw UsageError(fmt::format("--param-dtype bf16 needs --precision bf16 (the projection prices {})", profiles.front().precision));
  if (!user) all = project_sweep(f, m, profiles, o, asked, dt);
  write_projection(f, m, profiles.front(), all, o, cs, image_note);
  return 0;
}

}  // namespace pb
