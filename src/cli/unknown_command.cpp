#include "src/cli/unknown_command.hpp"

#include <algorithm>
#include <vector>

namespace fact::cli {
namespace {

// Edits (insert, delete, substitute, swap of neighbours) between two words.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1,
                          d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::optional<std::string> unknown_command_message(const CLI::App& app, std::string_view word) {
  if (word.empty() || word.front() == '-') return std::nullopt;
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->get_name() == word) return std::nullopt;
    names.push_back(sub->get_name());
  }
  std::string message = "unknown command '" + std::string(word) + "'";
  std::string best;
  size_t best_distance = 3;  // more edits than this is another word, not a typo
  for (const auto& name : names) {
    const size_t distance = edit_distance(word, name);
    const bool prefix = name.rfind(word, 0) == 0 && word.size() >= 3;
    if (distance < best_distance || (prefix && best.empty())) {
      best = name;
      best_distance = prefix ? best_distance : distance;
    }
  }
  if (!best.empty()) message += " — did you mean '" + best + "'?";
  message += "\ncommands:";
  for (const auto& name : names) message += " " + name;
  message += "\n(fact --help for what each does)";
  return message;
}

}  // namespace fact::cli
