// `octet plot RUN...`: a PNG of the train/validation loss curves of one or several run directories.
#include <cstdio>
#include <filesystem>

#include "octet/command.h"
#include "octet/error.h"
#include "octet/train.h"

namespace {
struct PlotArgs {
  std::vector<std::string> runs;
  std::string out, title = "octet: loss";
};
}  // namespace

OCTET_COMMAND("plot", [](CLI::App& app) {
  auto args = std::make_shared<PlotArgs>();
  auto* cmd = app.add_subcommand("plot", "Plot train/val loss curves of runs (gnuplot PNG)");
  cmd->add_option("runs", args->runs, "run directories (each with metrics.jsonl)")->required();
  cmd->add_option("--out", args->out,
                  "PNG path, not an existing file (default: <first run>/loss.png, redrawn)");
  cmd->add_option("--title", args->title, "plot title");
  cmd->callback([args] {
    // An explicit --out is never replaced; the default <run>/loss.png is octet's own plot of that
    // run, redrawn each time.
    if (!args->out.empty()) octet::require_new_file(args->out, "--out");
    const std::filesystem::path o(args->out);
    OCTET_CHECK(o.empty() || o.extension() == ".png",
                "--out " + o.string() + ": the plot is a PNG; give a path ending in .png");
    if (!o.parent_path().empty()) {  // a loop, a file or a link to nothing there, named as such
      octet::require_directory_path(o.parent_path().string(), "--out " + o.string() + ": the folder");
      std::error_code ec;
      OCTET_CHECK(std::filesystem::is_directory(o.parent_path(), ec),
                  "--out " + o.string() + ": the folder " + o.parent_path().string() + " does not exist");
    }
    const std::string png = args->out.empty() ? args->runs.front() + "/loss.png" : args->out;
    octet::plot_runs(args->runs, png, args->title);
    std::printf("wrote %s\n", png.c_str());
  });
});
