// src/train/plot.cpp — loss curves of one or several runs as a PNG, drawn by gnuplot (Debian's
// gnuplot-nox; the pngcairo terminal, or the plain png terminal where cairo is missing). Train loss
// is a thin line, validation loss a thick line with points, one colour per run. gnuplot is started
// without a shell (posix_spawnp) and every user string (title, paths, run names) is a gnuplot
// single-quoted string shown literally (noenhanced), so any title and any path work.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "octet/error.h"
#include "octet/train.h"

extern char** environ;

namespace octet {

namespace fs = std::filesystem;

namespace {

// Runs gnuplot with `args` (no shell: argv as given), its stdout and stderr into `log_path`.
// Returns the exit status; throws octet::Error if gnuplot cannot be started.
int run_gnuplot(const std::vector<std::string>& args, const std::string& log_path) {
  std::vector<char*> argv;
  std::string prog = "gnuplot";
  argv.push_back(prog.data());
  std::vector<std::string> copy = args;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, "gnuplot", &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  OCTET_CHECK(rc == 0, std::string("cannot run gnuplot: ") + std::strerror(rc) + " (install gnuplot-nox)");
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

bool has_pngcairo(const fs::path& tmp) {
  const std::string log = (tmp / "probe.log").string();
  const int rc = run_gnuplot({"-e", "set terminal pngcairo"}, log);
  const std::string out = read_text(log);
  return rc == 0 && out.find("unknown") == std::string::npos && out.find("rror") == std::string::npos;
}

// A gnuplot single-quoted string: a quote doubled, control characters (which would end the
// command) shown as spaces; everything else literal.
std::string quoted(const std::string& s) {
  std::string o = "'";
  for (char ch : s) {
    if (ch == '\'')
      o += "''";
    else
      o += (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ? ' ' : ch;
  }
  return o + "'";
}

}  // namespace

void plot_runs(const std::vector<std::string>& run_dirs, const std::string& png_path,
               const std::string& title) {
  OCTET_CHECK(!run_dirs.empty(), "plot needs at least one run directory");
  std::error_code dir_ec;
  OCTET_CHECK(!fs::is_directory(fs::symlink_status(png_path, dir_ec)),
              "plot: " + png_path + " is a directory, not a PNG file to write");
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
    int64_t n_train = 0, n_val = 0, n_lines = 0, first_bad = 0, n_bad = 0;
    while (std::getline(in, line)) {
      ++n_lines;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;  // a blank line: nothing to read
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception&) {}
      if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) {
        if (n_bad++ == 0) first_bad = n_lines;
        continue;
      }
      if (j.contains("val_loss") && j["val_loss"].is_number())
        fva << j["step"].get<int64_t>() << ' ' << j["val_loss"].get<double>() << '\n', ++n_val;
      else if (j.contains("loss") && j["loss"].is_number())
        ftr << j["step"].get<int64_t>() << ' ' << j["loss"].get<double>() << '\n', ++n_train;
    }
    // a crash can cut the last line short; any other unreadable line is worth a word
    if (n_bad > 1 || (n_bad == 1 && first_bad != n_lines))
      std::fprintf(stderr, "octet: warning: %s: skipped %lld unreadable line(s), the first at line %lld\n",
                   metrics.c_str(), static_cast<long long>(n_bad), static_cast<long long>(first_bad));
    OCTET_CHECK(n_train > 0, "no training steps in " + metrics);
    std::string label = fs::path(run_dirs[i]).lexically_normal().filename().string();
    if (label.empty()) label = fs::path(run_dirs[i]).lexically_normal().parent_path().filename().string();
    if (label.rfind("seed-", 0) == 0)  // a run of compare --seeds: <arm>/seed-<seed>
      label = fs::path(run_dirs[i]).lexically_normal().parent_path().filename().string() + "/" + label;
    const int color = int(i) + 1;
    if (!plots.empty()) plots += ", \\\n     ";
    plots += quoted(tr) + " using 1:2 with lines lw 1 lc " + std::to_string(color) + " title " +
             quoted(label + " train") + " noenhanced";
    if (n_val > 0)
      plots += ", \\\n     " + quoted(va) + " using 1:2 with linespoints lw 3 pt 7 ps 0.8 lc " +
               std::to_string(color) + " title " + quoted(label + " val") + " noenhanced";
  }
  const std::string script = (tmp / "plot.gp").string();
  {
    std::ofstream gp(script);
    gp << (has_pngcairo(tmp) ? "set terminal pngcairo size 1100,650 font 'sans,11'\n"
                             : "set terminal png size 1100,650\n");
    gp << "set output " << quoted((tmp / "plot.png").string()) << "\n";
    gp << "set title " << quoted(title) << " noenhanced\n";
    gp << "set xlabel 'step'\nset ylabel 'loss (nats/token)'\nset grid\nset key top right\n";
    gp << "plot " << plots << "\n";
  }
  const std::string log = (tmp / "gnuplot.log").string();
  const int rc = run_gnuplot({script}, log);
  if (rc == 0 && fs::exists(tmp / "plot.png")) {
    // into place by rename: a crash leaves the old PNG, and a symbolic link there is replaced, not
    // written through
    write_file_atomic(png_path, {read_file_bytes((tmp / "plot.png").string(), "gnuplot's PNG")});
    return;
  }
  std::string why = read_text(log);  // its last non-empty line, for a one-line error
  while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
  why = why.substr(why.find_last_of('\n') == std::string::npos ? 0 : why.find_last_of('\n') + 1);
  OCTET_FAIL("gnuplot failed (exit " + std::to_string(rc) + ") writing " + png_path + ": " + why);
}

}  // namespace octet
