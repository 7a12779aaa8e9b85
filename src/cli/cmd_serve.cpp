// `amptune serve`: the live, read-only web view of a results database (web/server.h,
// docs/SERVE.md).
#include <iostream>

#include "app/inspect.h"
#include "cli/commands.h"
#include "core/log.h"
#include "web/server.h"

namespace amptune::cli {

int cmd_serve(const Invocation& inv) {
  std::string db;
  web::ServeOptions options;
  int connections = static_cast<int>(options.max_connections);
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
                                           "connections served at once (one more gets 503)");
  if (!opts.parse(inv.args)) return 0;
  if (connections < 1 || connections > 100000) {
    throw UsageError("--max-connections " + std::to_string(connections) +
                     " is out of range (1-100000)");
  }
  options.max_connections = static_cast<size_t>(connections);
  options.db = db;
  app::open_read_only(db);  // a database that cannot be served is exit 5 now, not a page later
  web::serve(options, [&](const std::string& address, int port) {
    const bool loopback = address.rfind("127.", 0) == 0 || address == "::1";
    if (!loopback) {
      log::warn("serving on " + address + ": anyone who can reach this machine's port " +
                std::to_string(port) + " can read the results (there is no login); use " +
                "--bind 127.0.0.1 and an SSH tunnel to keep them private");
    }
    const std::string host = address.find(':') != std::string::npos ? "[" + address + "]" : address;
    std::cout << "serving " << db << " on http://" << host << ":" << port << "/" << std::endl;
  });
  return 0;
}

}  // namespace amptune::cli
