// parbench net: a workload's net as the JSON --workload FILE reads, to start one's own from.
#include <fmt/format.h>

#include "bench/cli.h"
#include "engine/check.h"
#include "engine/fsutil.h"
#include "workloads/workload.h"

namespace pb {

int cmd_net(const std::vector<std::string>& args) {
  Flags f("parbench net",
          "Writes a workload's net as JSON, the format --workload FILE reads (docs/usage.md, \"Workloads\"):\n"
          "every layer, the layers it reads where not the one before it, the target and Adam's settings.\n"
          "A built-in net is written at its --image and --width, named after them (a file may not take a\n"
          "built-in's name); edit it, and run it with --workload FILE.",
          {{"workload", "NAME|FILE", "great_net, resnet, unet, linear, or a .json net description", "great_net"},
           {"image", "PIXELS", "great_net, resnet, unet: image height and width (default: 512 on GPU, 96 on CPU)", ""},
           {"width", "SCALE", "great_net, resnet, unet: channel width scale (default: 1 on GPU, 0.5 on CPU)", "",
            FlagType::Number},
           {"device-kind", "KIND", "auto, cpu or cuda: the device whose --image and --width defaults apply", "auto"},
           {"out", "FILE", "a file to write it to instead of stdout", ""}});
  if (!f.parse(args)) return 0;
  if (!f.positional().empty()) throw UsageError(fmt::format("unexpected argument '{}'", f.positional()[0]));
  const WorkloadOptions wo = workload_options(f, device_kind(f.str("device-kind")));
  NetSpec net = resolve_workload(f.str("workload"), wo);
  if (scaled_workload(net.name)) net.name = fmt::format("{}-image{}-width{:g}", net.name, wo.image, wo.width);
  const std::string text = net_to_json(net);
  parse_net_json(text, "the written net");  // what it writes, it reads
  if (f.has("out")) write_file_atomic(f.str("out"), text);
  else fmt::print("{}", text);
  return 0;
}

}  // namespace pb
