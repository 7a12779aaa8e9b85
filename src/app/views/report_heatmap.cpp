// app/views/report_gnuplot.h heatmap_script: a heatmap (app/views/heatmap.h) as gnuplot commands
// and a data file. The keys' values reach the script as tic labels through gp_string; the data
// file holds numbers and amptune's own words (a value printed by significant, a mark's name).
#include <algorithm>
#include <cmath>
#include <sstream>

#include "app/views/report_gnuplot.h"
#include "app/views/table.h"

namespace amptune::app {
namespace {

constexpr int kHeatWidth = 960;

// The tics of an axis: each value (shortened) at its index; `longest` its longest label.
std::string tics(const std::vector<std::string>& values, size_t* longest) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    const std::string label = shortened(values[i], kHeatLabelChars);
    *longest = std::max(*longest, label.size());
    out += (i ? ", " : "") + gp_string(label) + " " + std::to_string(i);
  }
  return "(" + out + ")";
}

// The palette of heat_stops, reversed for a metric where lower is better (its lowest value is
// then the yellow end), over the map's range: the colours heat_colour gives the live view.
std::string palette(const HeatMap& map) {
  std::ostringstream s;
  s.precision(17);
  s << "set palette defined (";
  const auto& stops = heat_stops();
  for (size_t i = 0; i < stops.size(); ++i) {
    s << (i ? ", " : "") << stops[i].first << " " << gp_string(stops[i].second);
  }
  s << ")\n" << (map.higher_is_better ? "" : "set palette negative\n");
  if (!map.lo || !map.hi) return s.str() + "unset colorbox\n";
  double lo = *map.lo, hi = *map.hi;
  if (!(hi > lo)) {  // one value: the middle of the scale, as heat_goodness has it
    const double half = lo != 0 ? std::fabs(lo) / 2 : 1;
    lo -= half;
    hi += half;
  }
  s << "set cbrange [" << lo << ":" << hi << "]\nset cblabel "
    << gp_string(map.metric + " (" + heatmap_direction(map) + ")") << "\n";
  return s.str();
}

// A quoted word of the data file (amptune's own: a number or a mark's name).
std::string dat_word(const std::string& word) { return "\"" + word + "\""; }

// The data: a row per cell - column, row, has a value, the value, the mark (HeatMark), the text
// colour, the value's and the mark's label heights, the value's text and the mark's name.
std::string cell_rows(const HeatMap& map) {
  std::ostringstream data;
  data.precision(17);
  data << "# " << one_line(heatmap_title(map)) << "\n";
  for (const HeatCell& cell : map.cells) {
    const bool has = cell.value && std::isfinite(*cell.value);
    const bool marked = cell.mark != HeatMark::kNone;
    const bool dark = has && heat_dark(heat_goodness(map, *cell.value));
    data << cell.x << " " << cell.y << " " << (has ? 1 : 0) << " " << (has ? *cell.value : 0.0)
         << " " << static_cast<int>(cell.mark) << " " << (dark ? 0xffffff : 0) << " "
         << (marked ? cell.y - 0.12 : static_cast<double>(cell.y)) << " " << cell.y + 0.22 << " "
         << dat_word(heat_cell_text(cell)) << " " << dat_word(to_string(cell.mark)) << "\n";
  }
  return data.str();
}

// The plot command's elements: the coloured cells, the cells without a value, a pattern over
// the marked ones (a key entry each), the answer's key entry, the labels.
std::string plot_command(const HeatMap& map, const std::string& stem) {
  bool valued = false, valueless = false, answer = false;
  bool marks[4] = {false, false, false, false};
  for (const HeatCell& cell : map.cells) {
    (cell.value && std::isfinite(*cell.value) ? valued : valueless) = true;
    marks[static_cast<int>(cell.mark)] = true;
    answer = answer || cell.answer;
  }
  const std::string box = ":(0.5):(0.5) with boxxyerror ";
  std::vector<std::string> parts;
  if (valued) {
    parts.push_back(
        "using 1:($3 == 1 ? $2 : NaN):(0.5):(0.5):4 with boxxyerror fs solid 1.0 "
        "border lc rgb 'white' lc palette notitle");
  }
  if (valueless) {
    parts.push_back("using 1:($3 == 0 ? $2 : NaN)" + box + "fs solid 1.0 border lc rgb 'white' " +
                    "lc rgb " + gp_string(kHeatNoValue) + " title 'no value yet'");
  }
  const int patterns[4] = {0, 4, 5, 6};  // pruned, diverged, failed: hatches of their own
  for (int mark = 1; mark < 4; ++mark) {
    if (!marks[mark]) continue;
    parts.push_back("using 1:($5 == " + std::to_string(mark) + " ? $2 : NaN)" + box +
                    "fs transparent pattern " + std::to_string(patterns[mark]) +
                    " noborder lc rgb '#80808080' title " +
                    gp_string(to_string(static_cast<HeatMark>(mark))));
  }
  const bool small = map.x_values.size() > 12;
  parts.push_back("using 1:7:9:6 with labels tc rgb variable font '," +
                  std::string(small ? "8" : "11") + "' notitle");
  if (marks[1] || marks[2] || marks[3]) {
    parts.push_back("using 1:($5 > 0 ? $8 : NaN):10:6 with labels tc rgb variable font '," +
                    std::string(small ? "6" : "8") + "' notitle");
  }
  std::string plot = "plot ";
  for (size_t i = 0; i < parts.size(); ++i) {
    plot += (i ? ", \\\n     '' " : gp_string(stem + ".dat") + " ") + parts[i];
  }
  if (answer) {
    plot += ", \\\n     NaN with lines lw 4 lc rgb " + gp_string(kHeatAnswer) + " title " +
            gp_string("tune answer");
  }
  const bool keyed = valueless || answer || marks[1] || marks[2] || marks[3];
  return (keyed ? "set key outside below center horizontal samplen 2\n" : "unset key\n") + plot +
         "\n";
}

}  // namespace

std::string heatmap_script(const HeatMap& map, const std::string& stem, const std::string& title,
                           const std::string& after, std::string* data) {
  *data = cell_rows(map);
  size_t x_longest = 0, y_longest = 0;
  const std::string x_tics = tics(map.x_values, &x_longest);
  const std::string y_tics = tics(map.y_values, &y_longest);
  // Slanted column labels when they would not fit side by side (about 7 pixels a character).
  const bool slanted = map.x_values.size() * (x_longest + 2) * 7 > kHeatWidth - 200;
  // At least 320 pixels: the row key's name (at most kHeatLabelChars) runs up the left side.
  const int height = std::max(320, 150 + 50 * static_cast<int>(map.y_values.size())) +
                     (slanted ? static_cast<int>(5 * x_longest) : 0);
  std::ostringstream s;
  s << "reset\nset terminal pngcairo size " << kHeatWidth << "," << height
    << " noenhanced font 'sans,10'\nset output " << gp_string(stem + ".png") << "\nset title "
    << gp_string(title) << "\nset xrange [-0.5:" << map.x_values.size() - 0.5 << "]\n"
    << "set yrange [" << map.y_values.size() - 0.5 << ":-0.5]\n"  // the first row on top
    << "set xtics " << x_tics << " scale 0" << (slanted ? " rotate by -30 left" : "") << "\n"
    << "set ytics " << y_tics << " scale 0\nset xlabel "
    << gp_string(shortened(map.x_key, kHeatLabelChars)) << "\nset ylabel "
    << gp_string(shortened(map.y_key, kHeatLabelChars)) << "\nset bmargin " << (slanted ? 4 : 6)
    << "\n"
    << palette(map);
  int object = 0;
  for (const HeatCell& cell : map.cells) {
    if (!cell.answer) continue;
    s << "set object " << ++object << " rectangle from " << cell.x - 0.5 << "," << cell.y - 0.5
      << " to " << cell.x + 0.5 << "," << cell.y + 0.5 << " front fillstyle empty border lc rgb "
      << gp_string(kHeatAnswer) << " lw 4\n";
  }
  s << plot_command(map, stem) << "unset output\nreset\n" << after;
  return s.str();
}

}  // namespace amptune::app
