#include "web/server.h"

#include <poll.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/version.hpp>
#include <cctype>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "core/process.h"
#include "web/pages.h"
#include "web/render_pool.h"

namespace amptune::web {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr int kIoThreads = 2;  // they only parse and write: pages render on the pool

// What every connection shares: the options, the connections open (in all and per client
// address), the render pool.
struct Shared {
  ServeOptions options;
  int port = 0;  // the port listened on (options.port may be 0)
  std::atomic<size_t> open{0};
  std::mutex peers_mutex;
  std::map<std::string, size_t> peers;  // connections open per client address
  std::unique_ptr<RenderPool> pool;

  // Counts a connection from `peer` (its session uncounts it, refused or not): the connections
  // open before it, in all and from `peer`.
  std::pair<size_t, size_t> enter(const std::string& peer) {
    const size_t before = open++;
    std::lock_guard<std::mutex> lock(peers_mutex);
    return {before, peers[peer]++};
  }
  void leave(const std::string& peer) {
    --open;
    std::lock_guard<std::mutex> lock(peers_mutex);
    if (--peers[peer] == 0) peers.erase(peer);
  }
};

using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

void set_headers(Response& res, const char* type) {
  res.set(http::field::server, "amptune");
  res.set(http::field::content_type, type);
  res.set(http::field::cache_control, "no-store");
  res.set("X-Content-Type-Options", "nosniff");
  res.set("Referrer-Policy", "no-referrer");
  // The page's own inline style and script, requests to this server only; nothing from elsewhere.
  res.set("Content-Security-Policy",
          "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
          "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'");
}

// A text answer; the connection is closed after it unless `keep_alive` (a refusal that leaves
// the connection in a known state: the request was read whole).
Response plain(http::status status, const std::string& text, unsigned version,
               bool keep_alive = false) {
  Response res{status, version};
  set_headers(res, "text/plain; charset=utf-8");
  res.body() = text + "\n";
  res.keep_alive(keep_alive);
  res.prepare_payload();
  return res;
}

// Whether the client of socket `fd` has closed its side (or the connection is gone): asked by
// a render thread while the I/O threads own the socket, so it peeks at the socket's state with
// poll() and reads nothing. A request already waiting behind this one (pipelined) is POLLIN,
// not a close.
bool client_gone(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

// The refusal of a request that is whole but not one the server answers (method, size, Host,
// framing); none when it is to be rendered.
std::optional<Response> refusal(const Shared& shared, const Request& req, bool chunked) {
  const unsigned version = req.version();
  if (req.method() != http::verb::get && req.method() != http::verb::head) {
    Response res = plain(http::status::method_not_allowed, "read-only: GET and HEAD only", version);
    res.set(http::field::allow, "GET, HEAD");
    return res;
  }
  if (req.target().size() > kMaxTargetBytes) {
    return plain(http::status::uri_too_long, "address too long", version);
  }
  if (static_cast<size_t>(std::distance(req.begin(), req.end())) > kMaxHeaderFields) {
    return plain(http::status::request_header_fields_too_large, "too many header fields", version);
  }
  // RFC 9112 6.3: a request whose Transfer-Encoding does not end in chunked has no length that
  // can be known; Beast reads it as bodiless, which would take the body for the next request.
  if (req.count(http::field::transfer_encoding) != 0 && !chunked) {
    return plain(http::status::bad_request,
                 "Transfer-Encoding must be chunked (as its last coding): RFC 9112 6.3", version);
  }
  const auto host = req.find(http::field::host);
  if (host == req.end()) {
    if (version < 11) return std::nullopt;  // HTTP/1.0 need not send one; browsers always do
    return plain(http::status::bad_request, "a Host header is required (HTTP/1.1)", version);
  }
  const std::string name(host->value());
  if (!host_allowed(name, shared.options.bind, shared.port)) {
    return plain(http::status::misdirected_request,
                 "this server answers for localhost, a loopback address or " + shared.options.bind +
                     ":" + std::to_string(shared.port) + ", not for the Host '" +
                     log::clipped(name, 200) +
                     "' (a name other than these could be a web page's DNS rebinding)",
                 version);
  }
  return std::nullopt;
}

// One connection: reads requests one after another (keep-alive, pipelined), has each page
// rendered by the pool and writes the answers in order; closes on an error, a refusal that
// leaves the stream unknown, a client that closes, or kIdleSeconds without a whole request.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket&& socket, Shared& shared, std::string peer)
      : stream_(std::move(socket)), shared_(shared), peer_(std::move(peer)) {}
  ~Session() { shared_.leave(peer_); }

  void start() {
    net::dispatch(stream_.get_executor(),
                  beast::bind_front_handler(&Session::read, shared_from_this()));
  }

  // Answers `res` and closes, without reading a request (the server is full).
  void refuse(Response res) {
    net::dispatch(stream_.get_executor(),
                  [self = shared_from_this(), res = std::move(res)]() mutable {
                    self->write(std::move(res));
                  });
  }

 private:
  void read() {
    head_ = false;  // until a whole HEAD request has been read
    parser_.emplace();
    parser_->header_limit(kMaxHeaderBytes);
    parser_->body_limit(kMaxBodyBytes);
    stream_.expires_after(std::chrono::seconds(kIdleSeconds));
    http::async_read(stream_, buffer_, *parser_,
                     beast::bind_front_handler(&Session::on_read, shared_from_this()));
  }

  void on_read(beast::error_code ec, size_t) {
    if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
        ec == net::error::connection_reset || ec == net::error::operation_aborted) {
      return close();
    }
    if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
      return write(plain(
          http::status::request_header_fields_too_large,
          "request headers too large (at most " + std::to_string(kMaxHeaderBytes) + " bytes)", 11));
    }
    if (ec == http::error::body_limit) {
      return write(plain(http::status::payload_too_large, "request body too large", 11));
    }
    if (ec)
      return write(plain(http::status::bad_request, "malformed request: " + ec.message(), 11));
    const Request& req = parser_->get();
    head_ = req.method() == http::verb::head;
    if (auto res = refusal(shared_, req, parser_->chunked())) return write(std::move(*res));
    submit(std::string(req.target()), req.version(), req.keep_alive());
  }

  // Hands the page to the render pool; a full queue is 503 on a connection that stays usable.
  void submit(std::string target, unsigned version, bool keep_alive) {
    const Clock::time_point deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(shared_.options.page_seconds));
    const bool queued = shared_.pool->submit(
        peer_, [self = shared_from_this(), target = std::move(target), version, keep_alive,
                deadline] { self->render(target, version, keep_alive, deadline); });
    if (queued) return;
    Response res = plain(http::status::service_unavailable,
                         "busy: " + std::to_string(shared_.options.max_queued) +
                             " pages wait to be rendered; try again in a moment",
                         version, keep_alive);
    res.set(http::field::retry_after, "2");
    write(std::move(res));
  }

  // On a render thread: the page under a WorkBound (the deadline, and the client still there),
  // then the answer is written on the connection's strand. A client that left gets nothing.
  void render(const std::string& target, unsigned version, bool keep_alive,
              Clock::time_point deadline) {
    const int fd = stream_.socket().native_handle();  // open: no operation of ours closes it now
    std::optional<Response> res;
    try {
      WorkBound bound(deadline, [fd] { return client_gone(fd); });
      check_work_bound();  // gone or late while the page waited for a thread
      Page page = render_page(shared_.options.db, target);
      res.emplace(static_cast<http::status>(page.status), version);
      set_headers(*res, "text/html; charset=utf-8");
      res->keep_alive(keep_alive);
      res->body() = std::move(page.body);
      res->prepare_payload();
    } catch (const WorkAbandoned& e) {
      if (e.timed_out()) res = too_slow(version, keep_alive);
    } catch (const std::exception& e) {
      res = plain(http::status::internal_server_error, log::clipped(e.what(), 400), version);
    }
    net::post(stream_.get_executor(), [self = shared_from_this(), res = std::move(res)]() mutable {
      if (res) return self->write(std::move(*res));
      self->close();
    });
  }

  Response too_slow(unsigned version, bool keep_alive) const {
    std::ostringstream text;
    text << "this page took longer than " << shared_.options.page_seconds
         << " s to render, so the server stopped it (the database is large, busy or crafted); "
         << "try again, or give pages longer with amptune serve --page-seconds";
    return plain(http::status::service_unavailable, text.str(), version, keep_alive);
  }

  // Writes `res` (for HEAD its header alone, Content-Length included), then reads the next
  // request (bytes already read past this request are kept: a pipelined one) or closes.
  void write(Response res) {
    stream_.expires_after(std::chrono::seconds(kIdleSeconds));
    const bool close_after = !res.keep_alive();
    if (head_) {
      header_ = std::make_shared<http::response<http::empty_body>>(res.result(), res.version());
      header_->base() = res.base();
      return http::async_write(
          stream_, *header_,
          beast::bind_front_handler(&Session::on_write, shared_from_this(), close_after));
    }
    response_ = std::make_shared<Response>(std::move(res));
    http::async_write(
        stream_, *response_,
        beast::bind_front_handler(&Session::on_write, shared_from_this(), close_after));
  }

  void on_write(bool close_after, beast::error_code ec, size_t) {
    response_.reset();
    header_.reset();
    if (ec || close_after) return close();
    read();
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.socket().close(ignored);
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_{kMaxHeaderBytes + kMaxBodyBytes};
  std::optional<http::request_parser<http::string_body>> parser_;
  std::shared_ptr<Response> response_;
  std::shared_ptr<http::response<http::empty_body>> header_;
  bool head_ = false;
  Shared& shared_;
  const std::string peer_;
};

class Listener : public std::enable_shared_from_this<Listener> {
 public:
  Listener(net::io_context& ioc, const tcp::endpoint& endpoint, Shared& shared)
      : ioc_(ioc), acceptor_(net::make_strand(ioc)), shared_(shared) {
    beast::error_code ec;
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (ec) {
      throw EnvironmentError("cannot listen on " + endpoint.address().to_string() + ":" +
                             std::to_string(endpoint.port()) + ": " + ec.message() +
                             "; choose another --port (0: any free one) or --bind address");
    }
  }
  int port() const { return acceptor_.local_endpoint().port(); }
  void accept() {
    acceptor_.async_accept(net::make_strand(ioc_),
                           beast::bind_front_handler(&Listener::on_accept, shared_from_this()));
  }

 private:
  void on_accept(beast::error_code ec, tcp::socket socket) {
    if (!ec) admit(std::move(socket));
    if (!ec) return accept();
    // An accept that failed (a client gone, out of file descriptors) does not stop the server;
    // the next one waits a moment, so running out of descriptors is not a busy loop.
    retry_.expires_after(std::chrono::milliseconds(50));
    retry_.async_wait([self = shared_from_this()](beast::error_code) { self->accept(); });
  }

  // Serves the connection, or answers 503 and closes it when the server or its client's address
  // holds as many as it may.
  void admit(tcp::socket socket) {
    beast::error_code ec;
    const std::string peer = socket.remote_endpoint(ec).address().to_string();
    if (ec) return;  // the client is gone already
    const auto [open, peer_open] = shared_.enter(peer);
    auto session = std::make_shared<Session>(std::move(socket), shared_, peer);
    if (open >= shared_.options.max_connections) {
      session->refuse(
          plain(http::status::service_unavailable, "too many connections; try again", 11));
    } else if (peer_open >= shared_.options.max_per_peer) {
      session->refuse(plain(http::status::service_unavailable,
                            "too many connections from " + peer + " (at most " +
                                std::to_string(shared_.options.max_per_peer) +
                                "); close some and try again",
                            11));
    } else {
      session->start();
    }
  }

  net::io_context& ioc_;
  tcp::acceptor acceptor_;
  net::steady_timer retry_{acceptor_.get_executor()};
  Shared& shared_;
};

// The port of "host[:port]" or "[v6][:port]" split off: {address or name, port text}; unset
// when the value is not of that form.
std::optional<std::pair<std::string, std::string>> split_host(const std::string& host) {
  std::string name, port;
  if (!host.empty() && host[0] == '[') {
    const size_t end = host.find(']');
    if (end == std::string::npos) return std::nullopt;
    name = host.substr(1, end - 1);
    const std::string rest = host.substr(end + 1);
    if (!rest.empty() && rest[0] != ':') return std::nullopt;
    if (!rest.empty()) port = rest.substr(1);
  } else {
    const size_t colon = host.find(':');
    if (colon != std::string::npos && host.find(':', colon + 1) != std::string::npos) {
      return std::nullopt;  // an IPv6 address must be in brackets
    }
    name = host.substr(0, colon);
    if (colon != std::string::npos) port = host.substr(colon + 1);
  }
  const auto digit = [](unsigned char c) { return std::isdigit(c) != 0; };
  if (port.size() > 5 || !std::all_of(port.begin(), port.end(), digit)) return std::nullopt;
  if (name.empty()) return std::nullopt;
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return std::make_pair(name, port);
}

}  // namespace

bool host_allowed(const std::string& host, const std::string& bind, int port) {
  const auto parts = split_host(host);
  if (!parts) return false;
  const auto& [name, port_text] = *parts;
  if (name == "localhost") return true;
  beast::error_code ec;
  const net::ip::address address = net::ip::make_address(name, ec);
  if (ec) return false;  // a name: only localhost names this server for certain
  if (address.is_loopback()) return true;
  const bool our_port = port_text.empty() || std::stoi(port_text) == port;
  const net::ip::address bound = net::ip::make_address(bind, ec);
  if (ec || !our_port) return false;
  return bound.is_unspecified() || address == bound;
}

void serve(const ServeOptions& options,
           const std::function<void(const std::string& address, int port)>& on_listening) {
  beast::error_code ec;
  const net::ip::address address = net::ip::make_address(options.bind, ec);
  if (ec) throw UsageError("--bind " + options.bind + " is not an IP address (e.g. 127.0.0.1)");
  if (options.port < 0 || options.port > 65535) {
    throw UsageError("--port " + std::to_string(options.port) + " is not a port (0-65535)");
  }
  Shared shared;
  shared.options = options;
  net::io_context ioc{kIoThreads};
  auto listener = std::make_shared<Listener>(
      ioc, tcp::endpoint{address, static_cast<unsigned short>(options.port)}, shared);
  shared.port = listener->port();
  // A page's client may keep rendering `threads - 1` pages at once: one thread stays for the
  // others however slow one client's pages are.
  shared.pool = std::make_unique<RenderPool>(options.threads, options.max_queued,
                                             static_cast<size_t>(std::max(1, options.threads - 1)));
  on_listening(address.to_string(), shared.port);
  listener->accept();
  std::vector<std::thread> io;
  for (int i = 1; i < kIoThreads; ++i) io.emplace_back([&ioc] { ioc.run(); });
  ioc.run();
  for (auto& t : io) t.join();
}

}  // namespace amptune::web
