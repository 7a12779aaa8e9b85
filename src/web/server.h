// The HTTP server of `amptune serve` (docs/SERVE.md): Boost.Beast over Boost.Asio, serving
// web/pages.h read-only. Two I/O threads read requests and write answers; pages are rendered by
// a web/render_pool.h pool (ServeOptions::threads, a queue of ServeOptions::max_queued; full:
// 503), so a slow page never holds an I/O thread. Each render is bounded (core/process.h
// WorkBound): past ServeOptions::page_seconds it ends in 503, and it stops as soon as its client
// has closed the connection. Bounded against what a client sends: the request line and headers
// (kMaxHeaderBytes), the address (kMaxTargetBytes), the header count (kMaxHeaderFields), a body
// (GET and HEAD carry none: kMaxBodyBytes), the time a request may take to arrive and an idle
// connection may stay open (kIdleSeconds), the connections open at once (max_connections) and
// from one address (max_per_peer; one past either gets 503 and is closed). A Host header that
// names neither a loopback address nor the bound one is 421 (DNS rebinding: a web page that
// rebinds its name to 127.0.0.1 must not read the results). Requests sent back to back on one
// connection (pipelined) are answered in order. Each refusal is an HTTP error (400, 405, 413,
// 414, 421, 431, 503) and the server goes on. It stops with the process (SIGINT / SIGTERM end it
// at once: it writes nothing). No torch.
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
  int threads = 4;                 // pages rendered at once (the render pool's threads)
  size_t max_queued = 64;          // pages waiting for a render thread (503 past it)
  size_t max_connections = 256;    // connections open at once
  size_t max_per_peer = 32;        // connections open at once from one client address
  double page_seconds = 5;         // a page not rendered by then (from its request) is 503
};

// Whether `host` (a Host header's value) names this server for a client: a loopback name
// (localhost, 127.0.0.0/8, [::1]) with any port (a tunnel forwards another local port to it),
// the `bind` address with `port` or no port, or, when `bind` is every interface (0.0.0.0, ::),
// any IP address literal with `port` or none (a literal cannot be rebound as a DNS name can).
bool host_allowed(const std::string& host, const std::string& bind, int port);

// Listens, calls on_listening(address, port) once the socket is bound, and serves until the
// process ends. Throws EnvironmentError when the address cannot be bound (in use, not local) and
// UsageError for an address that is not an IP address.
void serve(const ServeOptions& options,
           const std::function<void(const std::string& address, int port)>& on_listening);

}  // namespace amptune::web
