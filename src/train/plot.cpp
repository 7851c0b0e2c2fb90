// src/train/plot.cpp — loss curves of one or several runs as a PNG, drawn by gnuplot (Debian's
// gnuplot-nox; the pngcairo terminal, or the plain png terminal where cairo is missing). Train loss
// is a thin line, validation loss a thick line with points, one colour per run.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "octet/error.h"
#include "octet/train.h"

namespace octet {

namespace fs = std::filesystem;

namespace {
bool has_pngcairo() {
  FILE* p = ::popen("gnuplot -e 'set terminal pngcairo' 2>&1", "r");
  if (!p) return false;
  char buf[256];
  std::string out;
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  const int rc = ::pclose(p);
  return rc == 0 && out.find("unknown") == std::string::npos && out.find("rror") == std::string::npos;
}
std::string quoted(const std::string& s) {
  OCTET_CHECK(s.find('\'') == std::string::npos, "path must not contain a single quote: " + s);
  return "'" + s + "'";
}
}  // namespace

void plot_runs(const std::vector<std::string>& run_dirs, const std::string& png_path, const std::string& title) {
  OCTET_CHECK(!run_dirs.empty(), "plot needs at least one run directory");
  const fs::path tmp = fs::temp_directory_path() / ("octet-plot-" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  struct Cleanup {
    fs::path p;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(p, ec);
    }
  } cleanup{tmp};

  std::string plots;
  for (size_t i = 0; i < run_dirs.size(); ++i) {
    const std::string metrics = run_dirs[i] + "/metrics.jsonl";
    std::ifstream in(metrics);
    OCTET_CHECK(in.good(), "no metrics in " + run_dirs[i] + " (missing " + metrics + ")");
    const std::string tr = (tmp / ("train" + std::to_string(i) + ".dat")).string();
    const std::string va = (tmp / ("val" + std::to_string(i) + ".dat")).string();
    std::ofstream ftr(tr), fva(va);
    std::string line;
    int64_t n_train = 0, n_val = 0;
    while (std::getline(in, line)) {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception&) {
        continue;
      }
      if (j.contains("val_loss") && j["val_loss"].is_number())
        fva << j["step"].get<int64_t>() << ' ' << j["val_loss"].get<double>() << '\n', ++n_val;
      else if (j.contains("loss") && j["loss"].is_number())
        ftr << j["step"].get<int64_t>() << ' ' << j["loss"].get<double>() << '\n', ++n_train;
    }
    OCTET_CHECK(n_train > 0, "no training steps in " + metrics);
    std::string label = fs::path(run_dirs[i]).lexically_normal().filename().string();
    if (label.empty()) label = fs::path(run_dirs[i]).lexically_normal().parent_path().filename().string();
    for (char& ch : label)
      if (ch == '\'' || ch == '_') ch = '-';
    const int color = int(i) + 1;
    if (!plots.empty()) plots += ", \\\n     ";
    plots += quoted(tr) + " using 1:2 with lines lw 1 lc " + std::to_string(color) + " title '" + label + " train'";
    if (n_val > 0)
      plots += ", \\\n     " + quoted(va) + " using 1:2 with linespoints lw 3 pt 7 ps 0.8 lc " +
               std::to_string(color) + " title '" + label + " val'";
  }
  const std::string script = (tmp / "plot.gp").string();
  {
    std::ofstream gp(script);
    gp << (has_pngcairo() ? "set terminal pngcairo size 1100,650 font 'sans,11'\n" : "set terminal png size 1100,650\n");
    gp << "set output " << quoted(png_path) << "\n";
    gp << "set title " << quoted(title) << "\n";
    gp << "set xlabel 'step'\nset ylabel 'loss (nats/token)'\nset grid\nset key top right\n";
    gp << "plot " << plots << "\n";
  }
  const std::string cmd = "gnuplot " + quoted(script) + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  OCTET_CHECK(p, "cannot run gnuplot (install gnuplot-nox)");
  char buf[256];
  std::string out;
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  const int rc = ::pclose(p);
  OCTET_CHECK(rc == 0 && fs::exists(png_path), "gnuplot failed (is gnuplot-nox installed?): " + out);
}

}  // namespace octet
