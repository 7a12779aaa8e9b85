// The HTTP server of `amptune serve` (docs/SERVE.md): Boost.Beast over Boost.Asio, serving
// web/pages.h read-only. Bounded against what a client sends: the request line and headers
// (kMaxHeaderBytes), the address (kMaxTargetBytes), the header count (kMaxHeaderFields), a body
// (GET and HEAD carry none: kMaxBodyBytes), the time a request may take to arrive and an idle
// connection may stay open (kIdleSeconds), and the connections served at once
// (ServeOptions::max_connections; one past it gets 503 and is closed). Each refusal is an HTTP
// error (400, 405, 413, 414, 431, 503) and the connection is closed; the server goes on. It
// stops with the process (SIGINT / SIGTERM end it at once: it writes nothing). No torch.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace amptune::web {

constexpr size_t kMaxHeaderBytes = 16 * 1024;  // request line + headers (431 past it)
constexpr size_t kMaxTargetBytes = 2048;       // the address (414 past it)
constexpr size_t kMaxHeaderFields = 64;        // (431 past it)
constexpr size_t kMaxBodyBytes = 4096;         // (413 past it)
constexpr int kIdleSeconds = 15;

struct ServeOptions {
  std::string db;                  // the results database (opened read-only per request)
  std::string bind = "127.0.0.1";  // the address listened on
  int port = 8080;                 // 0: a free port, told through on_listening
  int threads = 4;                 // requests rendered at once
  size_t max_connections = 256;    // connections open at once
};

// Listens, calls on_listening(address, port) once the socket is bound, and serves until the
// process ends. Throws EnvironmentError when the address cannot be bound (in use, not local) and
// UsageError for an address that is not an IP address.
void serve(const ServeOptions& options,
           const std::function<void(const std::string& address, int port)>& on_listening);

}  // namespace amptune::web
