// The epilogue steps aten ops spell after a GEMM (see step_spellings.hpp).
#include "patterns/gemm/discover/step_spellings.hpp"

#include <string_view>

#include "fact/discover/graph_rewrite.hpp"
#include "fact/discover/rule.hpp"
#include "fact/util/words.hpp"

namespace fact::gemm {

namespace {

struct Word {
  std::string name, value;
  bool optional = false;  // [name=value]: may be absent
};

std::vector<Word> words_of(std::string_view arguments) {
  std::vector<Word> words;
  for (std::string text : util::split_words(arguments)) {
    Word word;
    if (text.size() >= 2 && text.front() == '[' && text.back() == ']') {
      word.optional = true;
      text = text.substr(1, text.size() - 2);
    }
    const size_t equals = text.find('=');
    word.name = text.substr(0, equals);
    word.value = equals == std::string::npos ? std::string() : text.substr(equals + 1);
    words.push_back(std::move(word));
  }
  return words;
}

// The constant `arg` holds equals the word's value: a string spelled the same, or a number.
bool holds(const graph::Arg& arg, const std::string& value) {
  if (arg.kind != graph::Arg::Kind::Constant) return false;
  if (arg.constant.is_string()) return arg.constant.get<std::string>() == value;
  const auto number = discover::detail::number_constant(arg);
  if (!number) return false;
  try {
    size_t used = 0;
    const double expected = std::stod(value, &used);
    return used == value.size() && *number == expected;
  } catch (const std::exception&) {
    return false;
  }
}

bool arguments_match(const graph::Node& node, std::string_view arguments) {
  const std::vector<Word> words = words_of(arguments);
  if (node.args.size() > 2 + words.size()) return false;
  for (const auto& [name, arg] : node.kwargs) {
    bool named = false;
    for (const Word& word : words) named = named || word.name == name;
    if (!named) return false;
  }
  for (size_t i = 0; i < words.size(); ++i) {
    const graph::Arg* arg = discover::detail::argument(node, 2 + i, words[i].name.c_str());
    if (arg == nullptr ? !words[i].optional : !holds(*arg, words[i].value)) return false;
  }
  return true;
}

}  // namespace

const std::vector<std::string>& spelled_step_targets() {
  static const std::vector<std::string> targets = [] {
    std::vector<std::string> all;
    for (const StepOp& op : kStepOps) {
      for (std::string target : util::split_words(op.aten_targets)) all.push_back(std::move(target));
    }
    return all;
  }();
  return targets;
}

const StepOp* spelled_step(const graph::Node& node) {
  for (const StepOp& op : kStepOps) {
    if (op.aten_targets.empty() || !discover::target_in(node, util::split_words(op.aten_targets)))
      continue;
    if (arguments_match(node, op.aten_arguments)) return &op;
  }
  return nullptr;
}

}  // namespace fact::gemm
