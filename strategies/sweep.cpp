// What project sweeps of each strategy (strategies/sweep.h), read off the registry's lines.
#include "strategies/sweep.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "engine/check.h"

namespace pb {

namespace {
const std::vector<std::pair<Schedule, std::string>>& schedules() {
  static const std::vector<std::pair<Schedule, std::string>> v = {{Schedule::GPipe, "gpipe"}, {Schedule::OneFOneB, "1f1b"}};
  return v;
}

// A family's member by its own name: its shape.
std::optional<std::pair<int, int>> member_shape(const ProjectionFacts& f, const std::string& name) {
  const auto spec = parse_strategy(name);
  if (!spec || !spec->member_of(f.name)) return std::nullopt;
  return std::make_pair(spec->first, spec->second);
}

bool sweeps_micro(const ProjectionRule& p) {
  return p.axes == ProjectionRule::Axes::MicroBatches || p.axes == ProjectionRule::Axes::Schedules;
}
}  // namespace

std::string schedule_name(Schedule s) {
  for (const auto& [sc, name] : schedules())
    if (sc == s) return name;
  throw std::logic_error("schedule without a name");
}

std::vector<std::string> schedule_names() {
  std::vector<std::string> v;
  for (const auto& sc : schedules()) v.push_back(sc.second);
  return v;
}

bool parse_schedule(const std::string& name, Schedule* s) {
  for (const auto& [sc, n] : schedules())
    if (n == name) return *s = sc, true;
  return false;
}

std::vector<std::string> swept_strategies() {
  std::vector<std::string> v;
  for (const ProjectionFacts& f : projection_facts())
    if (f.projected.in_all) v.push_back(f.name);
  return v;
}

bool is_swept(const std::string& word) { return projection_facts_of(word) != nullptr; }

bool is_family(const std::string& word) {
  const ProjectionFacts* f = projection_facts_of(word);
  return f && f->family && f->name == word;
}

std::vector<Setting> sweep_settings(const std::string& word, int n, int64_t global, const SweepAxes& axes) {
  std::vector<Setting> out;
  const ProjectionFacts* f = projection_facts_of(word);
  if (!f || (f->single_device && n != 1)) return out;
  const ProjectionRule& p = f->projected;
  auto base = [](const std::string& name) {
    Setting s;
    s.strategy = name;
    return s;
  };
  if (f->family) {
    // The family: every schedule swept (and recompute) where its members have them; a member by
    // its name: that member alone. Micro-batches per replica.
    for (const auto& [d, s] : hybrid_factorizations(n)) {
      std::vector<std::string> names;
      if (word == f->name) {
        const bool scheduled = p.axes == ProjectionRule::Axes::Schedules;
        for (Schedule sc : scheduled ? axes.schedules : std::vector<Schedule>{Schedule::GPipe})
          for (bool rc : {false, true})
            if (!rc || (scheduled && axes.recompute)) names.push_back(f->family.member(d, s, sc, rc));
      } else if (member_shape(*f, word) == std::make_pair(d, s)) {
        names.push_back(word);
      }
      for (const std::string& name : names) {
        if (!sweeps_micro(p)) {
          out.push_back(base(name));
          continue;
        }
        for (int64_t m : axes.micro_batches) {
          if (m > global / d) continue;  // more micro-batches than a replica has samples
          Setting c = base(name);
          c.micro_batches = static_cast<int>(m);
          out.push_back(c);
        }
      }
    }
    return out;
  }
  switch (p.axes) {
    case ProjectionRule::Axes::Buckets:
      for (double b : axes.bucket_bytes) {
        Setting c = base(word);
        c.bucket_bytes = b;
        out.push_back(c);
      }
      break;
    case ProjectionRule::Axes::MicroBatches:  // a variant by name: its schedule and recompute
      for (int64_t m : axes.micro_batches) {
        if (m > global) continue;  // more micro-batches than samples
        if (p.schedule == Schedule::Interleaved && m % n != 0) continue;  // Megatron's groups of P micro-batches
        Setting c = as_swept(base(word));
        c.micro_batches = static_cast<int>(m);
        out.push_back(c);
      }
      break;
    case ProjectionRule::Axes::Schedules:
      for (int64_t m : axes.micro_batches)
        for (Schedule sc : axes.schedules) {
          if (m > global) continue;  // more micro-batches than samples
          Setting c = base(word);
          c.micro_batches = static_cast<int>(m);
          c.schedule = sc;
          out.push_back(c);
          if (axes.recompute) {
            c.recompute = true;
            out.push_back(c);
          }
        }
      break;
    case ProjectionRule::Axes::None:
      out.push_back(base(word));
      break;
  }
  return out;
}

std::string no_setting(const std::string& word, const std::vector<int64_t>& devices, const std::vector<int64_t>& micro) {
  const ProjectionFacts* f = projection_facts_of(word);
  const auto shape = f ? member_shape(*f, word) : std::nullopt;
  const bool has = shape && std::find(devices.begin(), devices.end(), shape->first * shape->second) != devices.end();
  // Interleaved 1F1B runs micro-batches in groups of its P workers (sweep_settings): when no count
  // is a multiple of any device count, that is the flag at fault, not the batch.
  if (f && !f->family && f->projected.schedule == Schedule::Interleaved) {
    bool multiple = false;
    for (int64_t m : micro)
      for (int64_t n : devices) multiple = multiple || (n > 0 && m % n == 0);
    if (!multiple)
      return fmt::format("--micro-batches {}: {} runs micro-batches in groups of its pipeline workers, so a count must be "
                         "a multiple of the device count (--devices {})",
                         fmt::join(micro, ","), word, fmt::join(devices, ","));
  }
  std::string why;
  if (shape && !has)
    why = fmt::format("{} runs on {} x {} = {} devices", word, shape->first, shape->second, shape->first * shape->second);
  else if (f && sweeps_micro(f->projected) && !is_family(word))
    why = fmt::format("every --micro-batches count ({}) is above the samples of a replica", fmt::join(micro, ","));
  else if (is_family(word)) why = fmt::format("{} needs a device count D x P with both at least 2 (4, 6, 8, ...)", word);
  else if (f && f->single_device) why = fmt::format("{} runs on one device", word);
  else why = "no configuration of it is possible there";
  return fmt::format("--strategies {}: nothing to project at --devices {}: {}", word, fmt::join(devices, ","), why);
}

Setting as_swept(const Setting& s) {
  const ProjectionFacts* f = projection_facts_of(s.strategy);
  if (!f || f->projected.variant_of.empty() || f->name != s.strategy) return s;
  Setting out = s;
  out.strategy = f->projected.variant_of;
  out.schedule = f->projected.schedule;
  out.recompute = f->projected.recompute;
  return out;
}

std::string run_name(const Setting& s) {
  const ProjectionFacts* f = projection_facts_of(s.strategy);
  if (!f) return s.strategy;
  if (const auto spec = parse_strategy(s.strategy); spec && spec->member())  // the name's schedule, else the setting's
    return f->family.member(spec->first, spec->second, spec->schedule != Schedule::GPipe ? spec->schedule : s.schedule,
                            spec->recompute || s.recompute);
  for (const ProjectionFacts& v : projection_facts()) {  // the variant registered for these options
    const ProjectionRule& p = v.projected;
    const std::string& base = p.variant_of.empty() ? v.name : p.variant_of;
    if (base == s.strategy && p.schedule == s.schedule && p.recompute == s.recompute) return v.name;
  }
  return s.strategy;
}

std::string setting_label(const Setting& s) {
  const ProjectionFacts* f = projection_facts_of(s.strategy);
  if (!f || is_family(s.strategy)) return s.strategy;
  if (f->projected.axes == ProjectionRule::Axes::Buckets)
    return fmt::format("{} ({:g} MiB buckets)", s.strategy, s.bucket_bytes / (1 << 20));
  if (f->projected.axes == ProjectionRule::Axes::MicroBatches)  // a schedule of its own (a variant is swept as its base)
    return fmt::format("{} (M={})", s.strategy, s.micro_batches);
  if (f->projected.axes != ProjectionRule::Axes::Schedules) return s.strategy;
  if (f->family) return fmt::format("{} (M={})", s.strategy, s.micro_batches);  // schedule and recompute in the name
  return fmt::format("{} (M={}{}{})", s.strategy, s.micro_batches,
                     s.schedule != Schedule::GPipe ? ", " + schedule_name(s.schedule) : "", s.recompute ? ", recompute" : "");
}

std::vector<std::string> setting_options(const Setting& s) {
  std::vector<std::string> o;
  const ProjectionFacts* f = projection_facts_of(s.strategy);
  if (!f || is_family(s.strategy)) return o;
  if (f->projected.axes == ProjectionRule::Axes::MicroBatches) o.push_back(fmt::format("micro_batches:{}", s.micro_batches));
  if (f->projected.axes == ProjectionRule::Axes::Schedules) {
    o.push_back(fmt::format("micro_batches:{}", s.micro_batches));
    if (s.schedule != Schedule::GPipe) o.push_back("schedule:" + schedule_name(s.schedule));
    if (s.recompute) o.push_back("recompute:1");
  }
  if (f->projected.axes == ProjectionRule::Axes::Buckets)
    o.push_back(fmt::format("bucket_mb:{:g}", s.bucket_bytes / (1 << 20)));
  return o;
}

std::vector<std::string> unit_classes() {
  std::vector<std::string> v;
  for (const ProjectionFacts& f : projection_facts())
    if (!f.projected.unit_class.empty() && std::find(v.begin(), v.end(), f.projected.unit_class) == v.end())
      v.push_back(f.projected.unit_class);
  return v;
}

std::string unit_class_of(const std::string& name) {
  const ProjectionFacts* f = projection_facts_of(name);
  return f ? f->projected.unit_class : "";
}

std::string shown_with(const std::string& strategy) {
  const ProjectionFacts* f = projection_facts_of(strategy);
  return f && !f->projected.shown_with.empty() ? f->projected.shown_with : strategy;
}

bool is_baseline(const std::string& strategy) {
  const ProjectionFacts* f = projection_facts_of(strategy);
  return f && f->single_device;
}

}  // namespace pb
