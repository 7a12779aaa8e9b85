// `amptune serve`: the live, read-only web view of a results database (web/server.h,
// docs/SERVE.md).
#include <iostream>

#include "app/views/inspect.h"
#include "cli/commands.h"
#include "core/log.h"
#include "web/server.h"

namespace amptune::cli {
namespace {

// A count option's value in [1, most], or UsageError naming the option.
size_t count_option(const char* name, int value, int most) {
  if (value < 1 || value > most) {
    throw UsageError(std::string("--") + name + " " + std::to_string(value) +
                     " is out of range (1-" + std::to_string(most) + ")");
  }
  return static_cast<size_t>(value);
}

void print_listening(const std::string& db, const std::string& address, int port) {
  const bool loopback = address.rfind("127.", 0) == 0 || address == "::1";
  if (!loopback) {
    log::warn("serving on " + address + ": anyone who can reach this machine's port " +
              std::to_string(port) + " can read the results (there is no login); use " +
              "--bind 127.0.0.1 and an SSH tunnel to keep them private");
  }
  const std::string host = address.find(':') != std::string::npos ? "[" + address + "]" : address;
  std::cout << "serving " << db << " on http://" << host << ":" << port << "/" << std::endl;
}

}  // namespace

int cmd_serve(const Invocation& inv) {
  std::string db;
  web::ServeOptions options;
  int connections = static_cast<int>(options.max_connections);
  int per_peer = static_cast<int>(options.max_per_peer);
  int queued = static_cast<int>(options.max_queued);
  Options opts("serve",
               "usage: amptune serve [options]\n\n"
               "A read-only web view of the database, live while runs train: the sweeps and\n"
               "their status counts, a sweep's comparison table and curves, one run's epochs,\n"
               "curves and diagnosis, a tune search's decision tree (docs/SERVE.md). Listens on\n"
               "the loopback address unless --bind says otherwise; never writes the database;\n"
               "Ctrl-C stops it.\n");
  opts.db(&db);
  opts.add()("port", po::value(&options.port)->default_value(options.port),
             "TCP port (0: any free port; the address is printed)")(
      "bind", po::value(&options.bind)->default_value(options.bind),
      "address to listen on: 127.0.0.1 (this machine only), 0.0.0.0 (every interface: anyone "
      "who reaches it reads the results)")("max-connections",
                                           po::value(&connections)->default_value(connections),
                                           "connections served at once (one more gets 503)")(
      "max-per-peer", po::value(&per_peer)->default_value(per_peer),
      "connections served at once from one client address (one more gets 503)")(
      "render-threads", po::value(&options.threads)->default_value(options.threads),
      "pages rendered at once (one client renders at most one less)")(
      "max-queued", po::value(&queued)->default_value(queued),
      "pages waiting for a render thread (one more gets 503)")(
      "page-seconds", po::value(&options.page_seconds)->default_value(options.page_seconds),
      "a page not rendered this many seconds after its request is stopped and answered 503");
  if (!opts.parse(inv.args)) return 0;
  options.max_connections = count_option("max-connections", connections, 100000);
  options.max_per_peer = count_option("max-per-peer", per_peer, 100000);
  options.max_queued = count_option("max-queued", queued, 100000);
  count_option("render-threads", options.threads, 256);
  if (!(options.page_seconds > 0 && options.page_seconds <= 86400)) {
    throw UsageError("--page-seconds " + std::to_string(options.page_seconds) +
                     " is out of range (above 0, at most 86400)");
  }
  options.db = db;
  app::open_read_only(db);  // a database that cannot be served is exit 5 now, not a page later
  web::serve(options,
             [&](const std::string& address, int port) { print_listening(db, address, port); });
  return 0;
}

}  // namespace amptune::cli
