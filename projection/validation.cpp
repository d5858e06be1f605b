// `project --validate --out` files read back, strictly, for `project --combine`.
#include "projection/validation.h"

#include "engine/fsutil.h"
#include "engine/json_input.h"
#include "projection/strict_json.h"

namespace pb::projection {

using nlohmann::json;

Validation parse_validation(const std::string& text, const std::string& source) {
  const json doc = parse_json_input(text, source);
  Obj top(doc, source, "");
  if (top.integer("parbench_validation", 1) != 1) top.fail("parbench_validation", "1 (the format version this program reads)");
  Validation v;
  v.source = source;
  for (const char* k : {"run", "machine"})  // where it came from: not needed to pool it
    if (top.has(k)) top.str(k);
  const json& rows = top.raw("rows");
  if (!rows.is_array()) top.fail("rows", "an array, one entry per configuration");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    Obj r(rows[i], source, fmt::format("rows[{}]", i));
    ValidationRow row;
    row.name = r.str("name");
    row.measured_s = r.number("measured_s", 0, true);
    row.predicted_s = r.number("predicted_s", 0, true);
    r.number("error");
    row.threads = r.has("threads") ? r.small_integer("threads", 1) : 0;
    row.compute_s = r.number_or("compute_s", 0);
    row.exposed_comm_s = r.number_or("exposed_comm_s", 0);
    row.idle_s = r.number_or("idle_s", 0);
    if (r.has("measured_times_s")) {
      const json& reps = r.raw("measured_times_s");
      if (!reps.is_array() || reps.empty()) r.fail(r.at_path("measured_times_s"), "a non-empty array of seconds");
      for (std::size_t k = 0; k < reps.size(); ++k) {
        if (!reps[k].is_number() || !(reps[k].get<double>() > 0) || !std::isfinite(reps[k].get<double>()))
          r.fail(fmt::format("{}[{}]", r.at_path("measured_times_s"), k), "a finite number > 0");
        row.measured_times_s.push_back(reps[k].get<double>());
      }
    } else {
      row.measured_times_s = {row.measured_s};
    }
    r.done();
    v.rows.push_back(std::move(row));
  }
  // Written alongside the rows; not needed to pool them.
  for (const char* k : {"mean_abs_error", "worst_abs_error", "anchor_scale", "one_device_spread"})
    if (top.has(k)) top.number(k);
  for (const char* k : {"combined", "rounds"})
    if (top.has(k)) top.raw(k);
  top.done();
  return v;
}

Validation load_validation(const std::string& path) { return parse_validation(read_file(path), path); }

}  // namespace pb::projection
