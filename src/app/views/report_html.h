// The HTML pieces the static report (app/views/report.h) and the live view (web/pages.h) share, so
// a sweep's comparison table and a tune search's tree read the same on both: escaping, the table of
// `amptune compare`, the search tree, the page's style. Every value from a database goes through
// html_escape (names and labels come from databases merged from elsewhere). No torch.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "app/views/compare.h"
#include "app/views/report.h"

namespace amptune::app {

// `text` with & < > " ' as entities: safe in element content and in quoted attributes.
std::string html_escape(const std::string& text);

// The comparison table (compare_columns / compare_cells), in a box that scrolls sideways when it
// is wider than the page.
void write_comparison_table(const CompareTable& table, std::ostream& html);

// A tune search: its status and note, the tree of runs (each edge a move, each node coloured by
// its outcome), the answer's YAML. With `run_link` ("/run/"), each run's name links to
// run_link + its id (the live view's run pages; the static report has none).
void write_tune_section(const TuneTree& tree, std::ostream& html, const std::string& run_link = "");

// What the comparison table's mfu column is measured against: the peaks of the runs
// (ReportModel::peaks); nothing when no run recorded one.
void write_mfu_note(const std::vector<std::string>& peaks, std::ostream& html);

// The pages' CSS (inline: a page loads nothing from elsewhere).
extern const char* const kPageStyle;

}  // namespace amptune::app
