// The pages of `amptune serve` (docs/SERVE.md), rendered from the results database per request:
//   /                    the sweeps with their runs' status counts and the runs in training
//   /sweep/NAME          a sweep: the comparison table (app/views/compare.h, as `compare` and
//   `report`
//                        print it) with its heatmaps (app/views/heatmap.h), its runs, and the
//                        curves of the report (app/views/report.h)
//   /sweep/NAME/tune     the sweep's newest tune search: its decision tree with outcomes
//   /run/ID              one run: its epochs, curves (metric, loss, loss scale, img/s), its
//                        prune decisions and its newest diagnosis (each module's error, named)
// Each page is a whole HTML document whose <main id="live"> a small inline script refreshes from
// the same address with ?part=live (just that element's content), so a page follows a run as it
// trains without a reload: two seconds after an answer, or five times as long as the answer took
// when that is longer, never while the tab is hidden (at once when it is shown again), and
// doubling up to a minute after failures; without JavaScript, a <noscript> refresh reloads it.
// Nothing is loaded from elsewhere (styles, script and SVG plots are in the page). The database is
// opened read-only for the request and closed after it: no lock is held between requests, and the
// page is never a half-written one (each read sees committed rows). No torch.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace amptune::web {

// A page's long tables are paged, so that a page's size and work do not grow with the database:
// the sweeps, a sweep's runs and a run's epochs show kPageRows rows from the address's ?from=N
// (0 first) with links to the pages before and after; the comparison table its kPageRows best
// rows; a run's epochs table its first kPageMetrics metrics (by name). The rest is said, with
// the command that prints all of it.
// A sweep of more than kMaxComparedRuns runs has its runs table alone (a page at a time) and
// names the commands that compare and plot them all; a database of more (or of more than
// kPageRows sweeps) has its sweeps listed with their run counts, not their status counts.
constexpr size_t kPageRows = 500;
constexpr size_t kPageMetrics = 100;
constexpr size_t kMaxComparedRuns = 5000;

struct Page {
  int status = 200;  // 200, 400 (a malformed address), 404 (no such page, sweep or run), 503
                     // (the database cannot be read: missing, not amptune's, of another schema)
  std::string body;  // HTML (a document, or the live part alone)
};

// The page at `target` (path and query, as the request line has it: "/sweep/tiny?part=live") of
// the database `db`. Never throws for what a request or the database holds: an error is a page
// that says what is wrong (its text escaped); a value the store refuses (StoreError: a JSON
// column nested or sized past its bound, a database that is not amptune's) is 503. Long loops
// ask check_work_bound() (core/process.h): under a WorkBound, a page past it throws WorkAbandoned.
Page render_page(const std::string& db, const std::string& target);

// `text` with %XX sequences decoded; unset when a % is not followed by two hex digits or a byte
// decodes to NUL.
std::optional<std::string> percent_decoded(const std::string& text);

}  // namespace amptune::web
