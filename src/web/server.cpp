#include "web/server.h"

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/version.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "web/pages.h"

namespace amptune::web {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

struct Shared {
  std::string db;
  size_t max_connections = 0;
  std::atomic<size_t> open{0};
};

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

Response plain(http::status status, const std::string& text, unsigned version) {
  Response res{status, version};
  set_headers(res, "text/plain; charset=utf-8");
  res.body() = text + "\n";
  res.keep_alive(false);
  res.prepare_payload();
  return res;
}

// One connection: reads requests one after another (keep-alive), answers each, closes on an
// error, a refusal, a client that closes, or kIdleSeconds without a whole request.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket&& socket, Shared& shared) : stream_(std::move(socket)), shared_(shared) {
    ++shared_.open;
  }
  ~Session() { --shared_.open; }

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
    head_ = parser_->get().method() == http::verb::head;
    write(answer(parser_->get()));
  }

  Response answer(const http::request<http::string_body>& req) {
    const unsigned version = req.version();
    if (req.method() != http::verb::get && req.method() != http::verb::head) {
      Response res =
          plain(http::status::method_not_allowed, "read-only: GET and HEAD only", version);
      res.set(http::field::allow, "GET, HEAD");
      return res;
    }
    if (req.target().size() > kMaxTargetBytes) {
      return plain(http::status::uri_too_long, "address too long", version);
    }
    if (static_cast<size_t>(std::distance(req.begin(), req.end())) > kMaxHeaderFields) {
      return plain(http::status::request_header_fields_too_large, "too many header fields",
                   version);
    }
    Page page;
    try {
      page = render_page(shared_.db, std::string(req.target()));
    } catch (const std::exception& e) {
      return plain(http::status::internal_server_error, log::clipped(e.what(), 400), version);
    }
    Response res{static_cast<http::status>(page.status), version};
    set_headers(res, "text/html; charset=utf-8");
    res.keep_alive(req.keep_alive());
    res.body() = std::move(page.body);
    res.prepare_payload();
    return res;
  }

  // Writes `res` (for HEAD its header alone, Content-Length included), then reads the next
  // request or closes.
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
    if (ec || close_after) return close();
    buffer_.consume(buffer_.size());
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
    if (!ec) {
      const bool full = shared_.open.load() >= shared_.max_connections;
      auto session = std::make_shared<Session>(std::move(socket), shared_);
      if (full) {
        session->refuse(
            plain(http::status::service_unavailable, "too many connections; try again", 11));
      } else {
        session->start();
      }
    }
    if (!ec) return accept();
    // An accept that failed (a client gone, out of file descriptors) does not stop the server;
    // the next one waits a moment, so running out of descriptors is not a busy loop.
    retry_.expires_after(std::chrono::milliseconds(50));
    retry_.async_wait([self = shared_from_this()](beast::error_code) { self->accept(); });
  }

  net::io_context& ioc_;
  tcp::acceptor acceptor_;
  net::steady_timer retry_{acceptor_.get_executor()};
  Shared& shared_;
};

}  // namespace

void serve(const ServeOptions& options,
           const std::function<void(const std::string& address, int port)>& on_listening) {
  beast::error_code ec;
  const net::ip::address address = net::ip::make_address(options.bind, ec);
  if (ec) throw UsageError("--bind " + options.bind + " is not an IP address (e.g. 127.0.0.1)");
  if (options.port < 0 || options.port > 65535) {
    throw UsageError("--port " + std::to_string(options.port) + " is not a port (0-65535)");
  }
  Shared shared;
  shared.db = options.db;
  shared.max_connections = options.max_connections;
  const int threads = std::max(1, options.threads);
  net::io_context ioc{threads};
  auto listener = std::make_shared<Listener>(
      ioc, tcp::endpoint{address, static_cast<unsigned short>(options.port)}, shared);
  on_listening(address.to_string(), listener->port());
  listener->accept();
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i) pool.emplace_back([&ioc] { ioc.run(); });
  ioc.run();
  for (auto& t : pool) t.join();
}

}  // namespace amptune::web
