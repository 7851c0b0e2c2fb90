// apps/octet/main.cpp — the `octet` command line: builds the CLI11 app from the registered
// subcommands (command.h) and turns every error into one line and an exit code (docs/cli.md
// §"Errors"): 2 for bad input ("octet: error: ..."), 1 for a run that failed ("octet: failed:
// ..."). Nothing escapes main: out-of-memory and any other exception become one sentence, and the
// source location of an octet::Error is printed only with --verbose.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <new>
#include <string>

#include "octet/command.h"
#include "octet/error.h"
#include "octet/train.h"

namespace octet::cli {
std::vector<CommandEntry>& registry() {
  static std::vector<CommandEntry> r;
  return r;
}
}  // namespace octet::cli

namespace {

// Edit distance with adjacent transpositions (optimal string alignment): "trian" is 1 from "train".
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

// The first argument that is not an option of the main app: the subcommand the user meant.
// Empty when there is none or it is a known command.
std::string unknown_command(const std::vector<char*>& args, const std::vector<std::string>& names) {
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string a = args[i];
    if (!a.empty() && a[0] == '-') continue;  // --verbose, --help
    return std::find(names.begin(), names.end(), a) == names.end() ? a : std::string();
  }
  return {};
}

// "unknown command 'trian' (did you mean 'train'?)", or the list of commands when none is close.
std::string unknown_command_message(const std::string& typed, const std::vector<std::string>& names) {
  std::string best;
  size_t best_d = std::string::npos;
  for (const auto& n : names) {
    const size_t d = edit_distance(typed, n);
    if (d < best_d) best_d = d, best = n;
  }
  // Close: two edits, or a third of the longer name for long ones ("atention-chek").
  if (!best.empty() && best_d <= std::max<size_t>(2, std::max(typed.size(), best.size()) / 3))
    return "unknown command '" + typed + "' (did you mean '" + best + "'?)";
  std::string all;
  for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
  return "unknown command '" + typed + "' (commands: " + all + "; see octet --help)";
}

// For a command whose own subcommand is required (`octet bench gemm`): the message for its first
// positional argument when that names none of them ("unknown command 'bench attenton' (did you mean
// 'bench attention'?)"), else empty.
std::string nested_unknown(CLI::App& app, const std::vector<char*>& args) {
  CLI::App* cmd = nullptr;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string a = args[i];
    if (a.empty() || a[0] == '-') {
      if (cmd) return {};  // an option before the subcommand: CLI11's own message
      continue;
    }
    if (!cmd) {
      for (CLI::App* c : app.get_subcommands({}))
        if (c->get_name() == a) cmd = c;
      if (!cmd || cmd->get_require_subcommand_min() == 0) return {};
      continue;
    }
    std::vector<std::string> names;  // "bench gemm", ...: the suggestion names the whole command
    for (const CLI::App* sub : cmd->get_subcommands({})) {
      if (sub->get_name() == a) return {};
      names.push_back(cmd->get_name() + " " + sub->get_name());
    }
    return unknown_command_message(cmd->get_name() + " " + a, names);
  }
  return {};
}

// For an option whose values are comma-separated lists (CLI11 delimiter ','): the message for a
// value with an empty item ("tiny,", ",bf16", "a,,b"), which CLI11's split would drop without a
// word; else empty. The arguments are walked as CLI11 reads them: a subcommand's name enters it,
// and an option's values are "--opt=v" or the arguments after it up to the next that starts with '-'.
std::string empty_list_item(CLI::App& app, const std::vector<char*>& args) {
  CLI::App* cmd = &app;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string a = args[i];
    if (a == "--") break;
    if (a.empty() || a[0] != '-') {
      for (CLI::App* sub : cmd->get_subcommands({}))
        if (sub->get_name() == a) cmd = sub;
      continue;
    }
    const size_t eq = a.find('=');
    const CLI::Option* opt = cmd->get_option_no_throw(a.substr(0, eq));
    if (!opt || opt->get_delimiter() != ',') continue;
    std::vector<std::string> values;
    if (eq != std::string::npos) values.push_back(a.substr(eq + 1));
    for (size_t j = i + 1; eq == std::string::npos && j < args.size() && args[j][0] != '-'; ++j)
      values.emplace_back(args[j]);
    for (const std::string& v : values)
      if (v.empty() || v.front() == ',' || v.back() == ',' || v.find(",,") != std::string::npos)
        return a.substr(0, eq) + ": an empty item in '" + v + "' (items are separated by single commas)";
  }
  return {};
}

// One line on stderr: "octet: error: ..." for bad input (exit 2), "octet: failed: ..." for a run
// that failed (exit 1); the source location only with --verbose.
constexpr int kBadInput = 2, kRunFailed = 1;
int report(int code, const std::string& msg, const std::string& location, bool verbose) {
  const char* kind = code == kBadInput ? "error" : "failed";
  if (verbose && !location.empty())
    std::fprintf(stderr, "octet: %s: %s [%s]\n", kind, msg.c_str(), location.c_str());
  else
    std::fprintf(stderr, "octet: %s: %s\n", kind, msg.c_str());
  return code;
}

// Output that could not be written (a full disk behind `> result.json`) fails the command: exit 1
// with the system's cause, never 0 with a truncated file.
int flushed(int code, bool verbose) {
  errno = 0;
  std::cout.flush();  // synced with stdio: this flushes stdout too, and sets errno if that fails
  int err = errno;
  if (std::fflush(stdout) != 0 && err == 0) err = errno;
  const bool bad = err != 0 || std::ferror(stdout) != 0 || !std::cout;
  if (bad && code == 0)  // an iostream that failed earlier leaves no errno behind
    return report(kRunFailed,
                  octet::io_error("cannot write", "standard output",
                                  err != 0 ? std::strerror(err) : "the write did not complete"),
                  "", verbose);
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"octet: native FP8 training of LLMs, with Delta-Matching FP8 attention"};
  app.require_subcommand(1);
  // --verbose may stand anywhere before a "--"; it is taken out here so that no subcommand's own
  // arguments (cast's "-1") are reparsed by the main app. It is listed in --help all the same.
  bool verbose = false;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::string(argv[i]) == "--") {
      args.insert(args.end(), argv + i, argv + argc);
      break;
    }
    if (std::string(argv[i]) == "--verbose")
      verbose = true;
    else
      args.push_back(argv[i]);
  }
  bool verbose_help = false;  // never set: the flag is taken out above
  app.add_flag("--verbose", verbose_help, "on an error, also print the source location that raised it");
  auto& reg = octet::cli::registry();
  std::sort(reg.begin(), reg.end(), [](auto& a, auto& b) { return a.name < b.name; });
  std::vector<std::string> names;
  for (auto& c : reg) {
    c.setup(app);
    names.push_back(c.name);
  }
  octet::cli::check_integer_options(&app);
  // Arguments after a "--" reach the main app (command.h, free_arguments); only a subcommand that
  // takes free arguments may have them.
  app.allow_extras();
  app.parse_complete_callback([&app] {
    const auto subs = app.get_subcommands();
    if (!app.remaining().empty() && (subs.empty() || !subs.front()->get_allow_extras()))
      throw CLI::ExtrasError(app.remaining());
  });
  // Every exception ends here as one line; the callbacks of the subcommands run inside parse().
  try {
    if (const std::string typed = unknown_command(args, names); !typed.empty())
      return report(kBadInput, unknown_command_message(typed, names), "", verbose);
    if (const std::string sub = nested_unknown(app, args); !sub.empty())
      return report(kBadInput, sub, "", verbose);
    if (const std::string item = empty_list_item(app, args); !item.empty())
      return report(kBadInput, item, "", verbose);
    app.parse(int(args.size()), args.data());
  } catch (const CLI::CallForHelp& e) {
    return flushed(app.exit(e), verbose);
  } catch (const CLI::CallForAllHelp& e) {
    return flushed(app.exit(e), verbose);
  } catch (const CLI::CallForVersion& e) {  // --version (cmd_version.cpp)
    return flushed(app.exit(e), verbose);
  } catch (const CLI::ParseError& e) {
    return report(kBadInput, e.what(), "", verbose);
  } catch (const octet::OutOfMemory& e) {  // before octet::Error, which it is
    return report(kRunFailed, std::string("out of memory (") + e.what() + ")", e.location(), verbose);
  } catch (const octet::Error& e) {
    return report(kBadInput, e.what(), e.location(), verbose);
  } catch (const octet::cli::RunFailure& e) {
    return report(kRunFailed, e.what(), "", verbose);
  } catch (const octet::TrainingStopped& e) {  // a diverged run: its message names the last checkpoint
    return report(kRunFailed, e.what(), "", verbose);
  } catch (const std::bad_alloc&) {
    return report(kRunFailed, "out of memory (the inputs need more memory than the machine has)", "",
                  verbose);
  } catch (const std::length_error&) {  // a size beyond what a std::vector can hold
    return report(kRunFailed, "out of memory (a size is beyond what can be allocated)", "", verbose);
  } catch (const std::filesystem::filesystem_error& e) {
    return report(kRunFailed, octet::io_error("cannot access", e.path1().string(), e.code().message()), "",
                  verbose);
  } catch (const std::exception& e) {
    return report(kRunFailed, "internal error (rerun with --verbose for the details; please report it)",
                  e.what(), verbose);
  } catch (...) {
    return report(kRunFailed, "internal error of unknown kind (please report it)", "", verbose);
  }
  return flushed(0, verbose);
}
