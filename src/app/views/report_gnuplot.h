// Internal to the report's files (app/views/report.h write_report): the gnuplot texts its writers
// share - report_gnuplot.cpp (the script, the line plots and bar charts, the page) and
// report_heatmap.cpp (the heatmaps). Every value from a database that reaches a script goes
// through gp_string; data files hold numbers and amptune's own words only, or one_line text in a
// comment. No torch.
#pragma once

#include <cstddef>
#include <string>

#include "app/views/heatmap.h"

namespace amptune::app {

// `text` with every control character (a line break would end a script line and start a
// command: names come from databases merged from elsewhere) as a space.
std::string one_line(std::string text);
// A gnuplot single-quoted string ('' stands for '), on one line.
std::string gp_string(const std::string& text);

// The commands that draw `map` into stem.png from stem.dat (titled `title`), and in *data that
// file's text: a row per cell. They start and end with gnuplot's `reset`: `after` (the script's
// common settings) follows the last, so the plots after it are drawn as before.
std::string heatmap_script(const HeatMap& map, const std::string& stem, const std::string& title,
                           const std::string& after, std::string* data);

}  // namespace amptune::app
