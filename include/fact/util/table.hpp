// Aligned plain-text tables for command output:
//
//   Table t({{"#"}, {"match"}, {"est. µs", Table::Align::Right}});
//   t.add_row({"1", "gemm_bias", "12.5"});
//   std::cout << t.render();
//
//   #  match      est. µs
//   -  ---------  -------
//   1  gemm_bias     12.5
//
// Widths count UTF-8 code points, so "µs" is two columns wide. The last column is not padded.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace fact::util {

class Table {
 public:
  enum class Align { Left, Right };
  struct Column {
    std::string header;
    Align align = Align::Left;
  };

  explicit Table(std::vector<Column> columns, std::string gap = "  ");

  // Rows shorter than the header are padded with empty cells; longer ones throw
  // std::invalid_argument.
  void add_row(std::vector<std::string> cells);
  // A rule line ("---") across every column at this point.
  void add_separator();
  size_t row_count() const;

  std::string render() const;

 private:
  std::vector<Column> columns_;
  std::string gap_;
  std::vector<std::vector<std::string>> rows_;  // an empty row is a separator
};

// Display width of UTF-8 text: code points (continuation bytes not counted).
size_t display_width(std::string_view text);
// `value` with `decimals` digits after the point ("12.50"); "-" for NaN.
std::string format_fixed(double value, int decimals);

}  // namespace fact::util
