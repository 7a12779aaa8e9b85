// The pages of `amptune serve` (docs/SERVE.md), rendered from the results database per request:
//   /                    the sweeps with their runs' status counts and the runs in training
//   /sweep/NAME          a sweep: the comparison table (app/compare.h, as `compare` and `report`
//                        print it), its runs, and the curves of the report (app/report.h)
//   /sweep/NAME/tune     the sweep's newest tune search: its decision tree with outcomes
//   /run/ID              one run: its epochs, curves (metric, loss, loss scale, img/s), its
//                        prune decisions and its newest diagnosis (each module's error, named)
// Each page is a whole HTML document whose <main id="live"> a small inline script refreshes from
// the same address with ?part=live (just that element's content) every two seconds, so a page
// follows a run as it trains without a reload; without JavaScript, a <noscript> refresh reloads
// it. Nothing is loaded from elsewhere (styles, script and SVG plots are in the page). The
// database is opened read-only for the request and closed after it: no lock is held between
// requests, and the page is never a half-written one (each read sees committed rows). No torch.
#pragma once

#include <optional>
#include <string>

namespace amptune::web {

struct Page {
  int status = 200;  // 200, 400 (a malformed address), 404 (no such page, sweep or run), 503
                     // (the database cannot be read: missing, not amptune's, of another schema)
  std::string body;  // HTML (a document, or the live part alone)
};

// The page at `target` (path and query, as the request line has it: "/sweep/tiny?part=live") of
// the database `db`. Never throws for what a request or the database holds: an error is a page
// that says what is wrong (its text escaped).
Page render_page(const std::string& db, const std::string& target);

// `text` with %XX sequences decoded; unset when a % is not followed by two hex digits or a byte
// decodes to NUL.
std::optional<std::string> percent_decoded(const std::string& text);

}  // namespace amptune::web
