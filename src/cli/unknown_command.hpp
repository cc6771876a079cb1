// The message for a first word that is no command of `fact` (a typo such as `fact optimise`).
#pragma once
#include <optional>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

namespace fact::cli {

// nullopt when `word` is one of `app`'s subcommands or an option (starts with '-'); else
// "unknown command 'WORD' — did you mean 'NAME'?" (the nearest command within two edits, or
// one that starts with WORD), followed by the list of commands.
std::optional<std::string> unknown_command_message(const CLI::App& app, std::string_view word);

}  // namespace fact::cli
