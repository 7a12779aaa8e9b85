#include "app/views/report_html.h"

#include <cctype>
#include <cmath>
#include <utility>
#include <vector>

#include "app/views/table.h"

namespace amptune::app {

std::string html_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

namespace {

// Text that may break after , _ / and a . before a letter (long --by values such as a
// casts.int32 list, column names such as overflow_steps; never inside a number), HTML-escaped.
std::string breakable(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    out += html_escape(std::string(1, c));
    const bool word_follows =
        i + 1 < text.size() && std::isalpha(static_cast<unsigned char>(text[i + 1]));
    if (c == ',' || c == '_' || c == '/' || (c == '.' && word_follows)) out += "<wbr>";
  }
  return out;
}

// Columns past which the table is set smaller: two --by keys and the nine fixed columns fit
// (mfu, a short percentage, made them nine).
constexpr size_t kWideTable = 11;

// The comparison table, in a box that scrolls sideways when it is still wider than the page.
}  // namespace

void write_comparison_table(const CompareTable& table, std::ostream& html) {
  const std::vector<std::string> columns = compare_columns(table);
  // Left-aligned: the --by values and the status. Breakable: those and the column names.
  const size_t status_column = columns.size() - (table.has_baseline ? 3 : 2);
  auto cell = [&](const std::string& tag, size_t column, const std::string& text) {
    const bool words = column < table.by.size() || column == status_column;
    html << "<" << tag << (words ? " class=\"t\">" : ">")
         << (words || tag == "th" ? breakable(text) : html_escape(text)) << "</" << tag << ">";
  };
  html << "<div class=\"scroll\"><table" << (columns.size() > kWideTable ? " class=\"wide\"" : "")
       << ">\n<tr>";
  for (size_t i = 0; i < columns.size(); ++i) cell("th", i, columns[i]);
  html << "</tr>\n";
  for (const auto& row : table.rows) {
    html << "<tr>";
    const std::vector<std::string> cells = compare_cells(table, row);
    for (size_t i = 0; i < cells.size(); ++i) cell("td", i, cells[i]);
    html << "</tr>\n";
  }
  html << "</table></div>\n";
}

namespace {

// One node of the tune tree, without its children.
void tune_node(const TuneNode& node, const std::string& run_link, std::ostream& html) {
  html << "<li>";
  if (!node.move.empty()) {
    html << "<span class=\"move\" title=\"" << html_escape(node.reason) << "\">round " << node.round
         << ": " << html_escape(node.move) << "</span> &rarr; ";
  }
  html << "<span class=\"node " << html_escape(node.outcome) << (node.answer ? " answer" : "")
       << "\">";
  if (run_link.empty()) {
    html << html_escape(node.run);
  } else {
    html << "<a href=\"" << html_escape(run_link + std::to_string(node.run_id)) << "\">"
         << html_escape(node.run) << "</a>";
  }
  html << " " << html_escape(node.outcome);
  if (std::isfinite(node.value)) html << " " << significant(node.value, 4);
  if (node.answer) html << " (answer)";
  html << "</span>";
}

// The tree as nested lists, depth first with a stack of its own (a chain of 100,000 rounds would
// overflow the call stack).
void tune_tree(const TuneTree& tree, const std::string& run_link, std::ostream& html) {
  std::vector<std::pair<size_t, size_t>> stack{{0, 0}};  // node, next child to write
  tune_node(tree.nodes[0], run_link, html);
  while (!stack.empty()) {
    auto& [index, next] = stack.back();
    const std::vector<size_t>& children = tree.nodes[index].children;
    if (next < children.size()) {
      if (next == 0) html << "\n<ul>\n";
      const size_t child = children[next++];
      tune_node(tree.nodes[child], run_link, html);
      stack.emplace_back(child, 0);  // (invalidates index and next)
      continue;
    }
    if (!children.empty()) html << "</ul>";
    html << "</li>\n";
    stack.pop_back();
  }
}

}  // namespace

void write_tune_section(const TuneTree& tree, std::ostream& html, const std::string& run_link) {
  html << "<h2>Tune search</h2>\n<p>" << records::to_string(tree.status) << ": "
       << html_escape(tree.note) << ". Metric <b>" << html_escape(tree.metric) << "</b>; reference "
       << html_escape(tree.reference) << " "
       << (std::isfinite(tree.reference_value) ? significant(tree.reference_value, 4) : "-");
  if (tree.status != records::TuneStatus::kSearching) {
    html << "; " << tree.epochs_spent << " epochs trained, the grid of the tried moves "
         << tree.grid_epochs;
  }
  html << ". Each edge is a move (hover: why), each node a run coloured by its outcome.</p>\n"
       << "<ul class=\"tree\">\n";
  tune_tree(tree, run_link, html);
  html << "</ul>\n";
  if (!tree.answer_yaml.empty() && tree.status == records::TuneStatus::kAnswered) {
    html << "<p>The answer, for base:</p>\n<pre>" << html_escape(tree.answer_yaml) << "</pre>\n";
  }
}

void write_mfu_note(const std::vector<std::string>& peaks, std::ostream& html) {
  if (peaks.empty()) return;
  std::string list;
  for (const auto& peak : peaks) list += (list.empty() ? "" : "; ") + peak;
  html << "<p>mfu: the share of the peak FLOP/s that a run's mean training img/s achieves "
          "(img/s x training FLOPs per sample / peak; docs/PERFORMANCE.md \"MFU\"). Peak: "
       << html_escape(list) << ".</p>\n";
}

const char* const kPageStyle =
    "body{font-family:sans-serif;margin:2em;color:#222}"
    ".scroll{max-width:100%;overflow-x:auto}"
    "table{border-collapse:collapse;font-size:0.9em}table.wide{font-size:0.78em}"
    "th,td{border:1px solid #ccc;padding:0.25em 0.5em;text-align:right}"
    "th{background:#f0f0f0}.t{text-align:left}td.t{max-width:24em}"
    ".note{color:#666;font-style:italic}"
    "img{max-width:100%;border:1px solid #eee;margin:0.5em 0}"
    ".node{padding:0 0.3em;border-radius:3px}.within{background:#c8ecc8}"
    ".outside{background:#f8dcb0}.pruned{background:#ddd;color:#555}"
    ".diverged,.failed{background:#f4c0c0}.start{background:#dde6f6}"
    ".answer{font-weight:bold;border:2px solid #282}.move{color:#444}"
    "ul.tree ul{margin:0.2em 0}";

}  // namespace amptune::app
