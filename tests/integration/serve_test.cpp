// amptune serve over real HTTP: the binary serves a database trained by the binary, and this test
// is its client over real sockets: every page, the refusals (malformed, oversized, too long, too
// many fields, a body, another method), 200 connections at once with the server's memory
// bounded, one past --max-connections refused, a page that changes while a run trains in another
// process, SIGTERM; and headless Chromium (Debian's chromium, which tools/test.sh installs)
// loading a run page: the DOM holds the curves and the numbers the database stores, and the
// page's script has polled the live part.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <sqlite3.h>

#include "integration/harness.h"

namespace amptune::testing {
namespace {

namespace fs = std::filesystem;

// --- a client -----------------------------------------------------------------------------------

// A connection to the server's port from the loopback address `from` (127.0.0.1 unless told:
// another 127.x address is another client to the server).
int connect_to(int port, const char* from = "127.0.0.1") {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in source{};
  source.sin_family = AF_INET;
  ::inet_pton(AF_INET, from, &source.sin_addr);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&source), sizeof source) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (fd >= 0) ::close(fd);
    return -1;
  }
  timeval timeout{60, 0};  // a server that never answers fails the test instead of hanging it
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  return fd;
}

bool send_all(int fd, const std::string& bytes) {
  for (size_t sent = 0; sent < bytes.size();) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;  // the server may close early on an oversized request
    sent += static_cast<size_t>(n);
  }
  return true;
}

std::string read_all(int fd) {
  std::string out;
  char buffer[65536];
  for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) out.append(buffer, n);
  ::close(fd);
  return out;
}

struct Reply {
  int status = 0;  // 0: no HTTP answer
  std::string head, body;
};

Reply parse(const std::string& raw) {
  Reply r;
  const size_t end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.1 ", 0) != 0 || end == std::string::npos) return r;
  r.status = std::stoi(raw.substr(9, 3));
  r.head = raw.substr(0, end);
  r.body = raw.substr(end + 4);
  return r;
}

// Sends `request` on a new connection and reads until the server closes it.
Reply http_exchange(int port, const std::string& request, const char* from = "127.0.0.1") {
  const int fd = connect_to(port, from);
  if (fd < 0) return {};
  send_all(fd, request);
  return parse(read_all(fd));
}

Reply get(int port, const std::string& target, const char* from = "127.0.0.1") {
  return http_exchange(
      port, "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
      from);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// --- the server ---------------------------------------------------------------------------------

struct Server {
  pid_t pid = -1;
  int port = 0;
};

// Starts `amptune serve` on a free port; its port from the line it prints.
Server start_server(const std::string& db, const std::string& dir,
                    std::vector<std::string> more = {}) {
  std::vector<std::string> args = {"serve", "--db", db, "--port", "0"};
  args.insert(args.end(), more.begin(), more.end());
  Server s;
  s.pid = spawn_amptune(args, dir, SpawnOptions({}, "serve"));
  const std::regex line(R"(on http://127\.0\.0\.1:(\d+)/)");
  for (int i = 0; i < 600 && s.port == 0; ++i) {
    std::smatch m;
    const std::string out = read_file(dir + "/serve.out");
    if (std::regex_search(out, m, line)) s.port = std::stoi(m[1]);
    if (s.port == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_NE(s.port, 0) << read_file(dir + "/serve.err");
  return s;
}

// Kilobytes of the process's peak resident memory (VmHWM).
long peak_kb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

TinySweep trained_sweep(int epochs, const std::string& tag) {
  TinyOptions options = quick_tiny("", epochs);
  options.dir_tag = tag;
  TinySweep f = make_tiny_sweep(options);
  const Result r = run_amptune({"run", f.yaml, "--db", f.db, "-q"}, f.dir);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return f;
}

TEST(ServeCli, EveryPageAndEveryRefusalOverHttp) {
  const TinySweep f = trained_sweep(2, "pages");
  const Server server = start_server(f.db, f.dir);
  StopOnExit stop(server.pid);
  ASSERT_NE(server.port, 0);
  for (const char* target : {"/", "/sweep/tiny", "/sweep/tiny/tune", "/run/1", "/run/1?part=live",
                             "/sweep/tiny?part=live"}) {
    const Reply r = get(server.port, target);
    EXPECT_EQ(r.status, 200) << target << "\n" << r.head << r.body;
    EXPECT_NE(r.head.find("Content-Type: text/html; charset=utf-8"), std::string::npos);
    EXPECT_NE(r.head.find("Content-Security-Policy: default-src 'none'"), std::string::npos);
  }
  EXPECT_NE(get(server.port, "/sweep/tiny").body.find("<a href=\"/run/1\">1</a>"),
            std::string::npos);
  EXPECT_EQ(get(server.port, "/nope").status, 404);
  EXPECT_EQ(get(server.port, "/run/7").status, 404);
  EXPECT_EQ(get(server.port, "/sweep/%zz").status, 400);
  // HEAD: the headers of the page, its length, no body.
  const Reply head =
      http_exchange(server.port, "HEAD / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(head.status, 200);
  EXPECT_NE(head.head.find("Content-Length: " + std::to_string(get(server.port, "/").body.size())),
            std::string::npos)
      << head.head;
  EXPECT_TRUE(head.body.empty());
  // The refusals: each an HTTP error, the connection closed.
  EXPECT_EQ(
      http_exchange(server.port, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n").status,
      405);
  EXPECT_EQ(http_exchange(server.port, "HELLO THERE\r\n\r\n").status, 400);
  EXPECT_EQ(http_exchange(server.port, "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " +
                                           std::string(64 * 1024, 'a') + "\r\n\r\n")
                .status,
            431);
  EXPECT_EQ(get(server.port, "/" + std::string(3000, 'a')).status, 414);
  std::string fields;
  for (int i = 0; i < 100; ++i) fields += "X-" + std::to_string(i) + ": 1\r\n";
  EXPECT_EQ(http_exchange(server.port, "GET / HTTP/1.1\r\nHost: x\r\n" + fields + "\r\n").status,
            431);
  EXPECT_EQ(
      http_exchange(server.port, "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" +
                                     std::string(100000, 'b'))
          .status,
      413);
  // A client that sends half a request and goes away costs nothing lasting.
  const int half = connect_to(server.port);
  send_all(half, "GET / HTTP/1.1\r\nHo");
  ::close(half);
  // Still serving, and SIGTERM ends it promptly (it writes nothing, so it ends at once).
  EXPECT_EQ(get(server.port, "/").status, 200);
  ::kill(server.pid, SIGTERM);
  EXPECT_EQ(wait_exit_code(server.pid, 10), 130);
}

TEST(ServeCli, TwoHundredConnectionsAtOnceAreServedInBoundedMemory) {
  const TinySweep f = trained_sweep(1, "many");
  // Every page waits its turn (a queue of 200); from 8 addresses, 25 each (at most 32 each).
  const Server server = start_server(f.db, f.dir, {"--max-queued", "200"});
  StopOnExit stop(server.pid);
  ASSERT_NE(server.port, 0);
  EXPECT_EQ(get(server.port, "/sweep/tiny").status, 200);
  const long before = peak_kb(server.pid);
  std::vector<int> fds;
  for (int i = 0; i < 200; ++i) {
    fds.push_back(connect_to(server.port, ("127.0.0." + std::to_string(1 + i % 8)).c_str()));
  }
  for (int fd : fds) {
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(send_all(
        fd, "GET /sweep/tiny HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"));
  }
  int ok = 0;
  for (int fd : fds) ok += parse(read_all(fd)).status == 200;
  EXPECT_EQ(ok, 200);
  const long after = peak_kb(server.pid);
  // Each page is rendered by one of a few threads and sent; nothing grows with the connections
  // but their buffers (at most 20 KB each), so 200 of them stay far below 64 MiB.
  EXPECT_LT(after - before, 64 * 1024) << before << " kB -> " << after << " kB";
  std::printf("serve peak memory: %ld kB before, %ld kB after 200 concurrent connections\n", before,
              after);
}

TEST(ServeCli, OneConnectionPastTheLimitIsRefusedWith503) {
  const TinySweep f = trained_sweep(1, "limit");
  const Server server = start_server(f.db, f.dir, {"--max-connections", "2"});
  StopOnExit stop(server.pid);
  ASSERT_NE(server.port, 0);
  const int a = connect_to(server.port), b = connect_to(server.port);  // idle, held open
  ASSERT_GE(a, 0);
  ASSERT_GE(b, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // both accepted
  EXPECT_EQ(get(server.port, "/").status, 503);
  ::close(a);
  ::close(b);
  Reply r;
  for (int i = 0; i < 100 && r.status != 200; ++i) {  // the two closes are seen by the server
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    r = get(server.port, "/");
  }
  EXPECT_EQ(r.status, 200);
  const Result bad = run_amptune({"serve", "--db", f.db, "--max-connections", "0"}, f.dir);
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  const Result missing = run_amptune({"serve", "--db", f.dir + "/none.sqlite"}, f.dir);
  EXPECT_EQ(missing.exit_code, 5) << missing.err;
  EXPECT_NE(missing.err.find("none.sqlite does not exist"), std::string::npos) << missing.err;
}

TEST(ServeCli, BadOptionsABusyPortAndAWideBindAreSaid) {
  const TinySweep f = trained_sweep(1, "options");
  const Server server = start_server(f.db, f.dir);
  StopOnExit stop(server.pid);
  ASSERT_NE(server.port, 0);
  const Result busy =
      run_amptune({"serve", "--db", f.db, "--port", std::to_string(server.port)}, f.dir);
  EXPECT_EQ(busy.exit_code, 9) << busy.err;  // the environment's: README "Exit codes"
  EXPECT_NE(busy.err.find("cannot listen on 127.0.0.1:" + std::to_string(server.port)),
            std::string::npos)
      << busy.err;
  const Result bind = run_amptune({"serve", "--db", f.db, "--bind", "localhost"}, f.dir);
  EXPECT_EQ(bind.exit_code, 2);
  EXPECT_NE(bind.err.find("--bind localhost is not an IP address"), std::string::npos) << bind.err;
  EXPECT_EQ(run_amptune({"serve", "--db", f.db, "--port", "70000"}, f.dir).exit_code, 2);
  // Every interface: served, with a warning that anyone reaching the port reads the results.
  const pid_t wide = spawn_amptune({"serve", "--db", f.db, "--port", "0", "--bind", "0.0.0.0"},
                                   f.dir, SpawnOptions({}, "wide"));
  StopOnExit stop_wide(wide);
  for (int i = 0; i < 600 && read_file(f.dir + "/wide.out").empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_NE(read_file(f.dir + "/wide.out").find("on http://0.0.0.0:"), std::string::npos);
  EXPECT_NE(read_file(f.dir + "/wide.err").find("can read the results (there is no login)"),
            std::string::npos);
}

std::string epochs_recorded(const std::string& page) {
  std::smatch m;
  static const std::regex re(R"(; (\d+) epochs recorded;)");
  return std::regex_search(page, m, re) ? std::string(m[1]) : "?";
}

TEST(ServeCli, ARunPageFollowsTheRunAsAnotherProcessTrainsIt) {
  TinyOptions options = quick_tiny("", 4);
  options.dir_tag = "live";
  const TinySweep f = make_tiny_sweep(options);
  const Result first =
      run_amptune({"run", f.yaml, "--db", f.db, "-q", "--stop-after-epoch", "0"}, f.dir);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const Server server = start_server(f.db, f.dir);
  StopOnExit stop(server.pid);
  ASSERT_NE(server.port, 0);
  const Reply before = get(server.port, "/run/1?part=live");
  ASSERT_EQ(before.status, 200);
  EXPECT_EQ(epochs_recorded(before.body), "1");
  EXPECT_NE(before.body.find("<b class=\"status\">pending</b>"), std::string::npos) << before.body;
  // Another process trains the rest while the page is read again and again.
  const pid_t trainer =
      spawn_amptune({"run", f.yaml, "--db", f.db, "-q"}, f.dir, SpawnOptions({}, "train"));
  StopOnExit stop_trainer(trainer);
  std::set<std::string> seen;
  int errors = 0;
  int status = 0;
  while (::waitpid(trainer, &status, WNOHANG) == 0) {
    const Reply r = get(server.port, "/run/1?part=live");
    errors += r.status != 200;
    seen.insert(epochs_recorded(r.body));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_file(f.dir + "/train.err");
  EXPECT_EQ(errors, 0);  // every read while the writer commits is a whole page
  const Reply after = get(server.port, "/run/1?part=live");
  EXPECT_EQ(epochs_recorded(after.body), "4");
  EXPECT_NE(after.body.find("<b class=\"status\">done</b>"), std::string::npos);
  EXPECT_NE(after.body, before.body);
  std::string states;
  for (const auto& s : seen) states += s + " ";
  std::printf("epochs recorded as seen while the run trained: %s\n", states.c_str());
}

// --- hostile clients and crafted databases (issue 46) -------------------------------------------

void exec_sql(const std::string& db, const std::string& sql) {
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &raw), SQLITE_OK);
  char* error = nullptr;
  const int rc = sqlite3_exec(raw, sql.c_str(), nullptr, nullptr, &error);
  EXPECT_EQ(rc, SQLITE_OK) << (error ? error : "") << "\n" << sql.substr(0, 400);
  sqlite3_free(error);
  sqlite3_close(raw);
}

std::vector<std::string> run_columns(const std::string& db) {
  sqlite3* raw = nullptr;
  std::vector<std::string> columns;
  if (sqlite3_open(db.c_str(), &raw) != SQLITE_OK) return columns;
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(raw, "SELECT name FROM pragma_table_info('runs')", -1, &st, nullptr);
  while (sqlite3_step(st) == SQLITE_ROW) {
    columns.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(st, 0)));
  }
  sqlite3_finalize(st);
  sqlite3_close(raw);
  return columns;
}

// Adds `n` copies of run 1 to its sweep, without epochs, each with a name, cell and hash of its
// own (ids 2 .. n + 1); with `chain`, each forked from the one before at epoch 5: a fork chain
// n deep whose last run's lineage reaches run 1 through every other.
void clone_run(const std::string& db, int n, bool chain) {
  std::string columns, values;
  for (const std::string& c : run_columns(db)) {
    std::string v = "r." + c;
    if (c == "id") v = "1 + c.n";
    if (c == "name") v = "r.name || '-' || c.n";
    if (c == "cell_index") v = "c.n";
    if (c == "config_hash") v = "r.config_hash || c.n";
    if (c == "label") v = "'clone ' || c.n";
    if (c == "status") v = "'pending'";
    if (chain && c == "parent_run_id") v = "c.n";
    if (chain && c == "parent_epoch") v = "5";
    if (chain && c == "fork_changes") v = "'crafted'";
    columns += (columns.empty() ? "" : ", ") + c;
    values += (values.empty() ? "" : ", ") + v;
  }
  exec_sql(db, "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < " +
                   std::to_string(n) + ") INSERT INTO runs (" + columns + ") SELECT " + values +
                   " FROM runs r, c WHERE r.id = 1");
}

// Sends `target` and returns the connection without reading the answer.
int send_get(int port, const std::string& target, const char* from = "127.0.0.1") {
  const int fd = connect_to(port, from);
  send_all(fd, "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  return fd;
}

// Requests with a Host header that names another server are refused (DNS rebinding: a page of
// rebind.attacker.example whose name now resolves to 127.0.0.1 must not read the results).
TEST(ServeCli, AHostHeaderThatNamesAnotherServerIs421) {
  const TinySweep f = trained_sweep(1, "host");
  const Server server = start_server(f.db, f.dir);
  StopOnExit stop(server.pid);
  ASSERT_NE(server.port, 0);
  const std::string port = std::to_string(server.port);
  const auto with_host = [&](const std::string& host) {
    return http_exchange(server.port,
                         "GET /sweep/tiny HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n");
  };
  for (const std::string& host : std::vector<std::string>{
           "rebind.attacker.example", "rebind.attacker.example:" + port,
                                  "10.1.2.3:" + port, "localhost.attacker.example", "127.0.0.1:x",
                                  "[::1", "::1", "[fe80::1]:" + port}) {
    const Reply r = with_host(host);
    EXPECT_EQ(r.status, 421) << host << "\n" << r.head << r.body;
    EXPECT_EQ(r.body.find("<table"), std::string::npos) << host;
  }
  EXPECT_NE(with_host("evil.example").body.find("not for the Host 'evil.example'"),
            std::string::npos);
  // A loopback name with any port (an SSH tunnel forwards another local port to this one).
  for (const std::string& host : std::vector<std::string>{"localhost", "LocalHost:" + port, "127.0.0.1", "127.0.0.1:" + port,
                                 "127.9.8.7:9000", "[::1]", "[::1]:" + port}) {
    EXPECT_EQ(with_host(host).status, 200) << host;
  }
  // HTTP/1.1 without a Host is malformed; HTTP/1.0 need not send one.
  EXPECT_EQ(http_exchange(server.port, "GET / HTTP/1.1\r\nConnection: close\r\n\r\n").status, 400);
  const int fd = connect_to(server.port);
  send_all(fd, "GET / HTTP/1.0\r\n\r\n");
  EXPECT_EQ(read_all(fd).substr(0, 13), "HTTP/1.0 200 ");
}

// Two requests sent at once on one connection are both answered, in order, without waiting for
// the idle close; a Transfer-Encoding the server cannot frame is 400 (RFC 9112 6.3).
TEST(ServeCli, PipelinedRequestsAreAnsweredAndAnUnknownTransferEncodingIs400) {
  const TinySweep f = trained_sweep(1, "pipeline");
  const Server server = start_server(f.db, f.dir);
  StopOnExit stop(server.pid);
  ASSERT_NE(server.port, 0);
  const auto start = std::chrono::steady_clock::now();
  const int fd = connect_to(server.port);
  send_all(fd,
           "GET /run/1?part=live HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
           "GET /nope HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
           "HEAD / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  const std::string raw = read_all(fd);
  const double seconds = seconds_since(start);
  std::vector<int> statuses;
  static const std::regex status_line(R"(HTTP/1\.1 (\d{3}) )");
  for (std::sregex_iterator it(raw.begin(), raw.end(), status_line), end; it != end; ++it) {
    statuses.push_back(std::stoi((*it)[1]));
  }
  EXPECT_EQ(statuses, (std::vector<int>{200, 404, 200})) << raw.substr(0, 600);
  EXPECT_LT(seconds, 10.0) << "the pipelined requests waited for the idle close";
  for (const char* coding : {"xchunked", "chunked, gzip", "gzip"}) {
    const Reply r = http_exchange(server.port, std::string("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                                           "Transfer-Encoding: ") +
                                                   coding + "\r\n\r\n");
    EXPECT_EQ(r.status, 400) << coding << "\n" << r.head;
  }
  const Reply chunked = http_exchange(
      server.port,
      "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n"
      "\r\n0\r\n\r\n");
  EXPECT_EQ(chunked.status, 200) << chunked.head;
}

// One address holding every connection it may (256 idle ones, the old limit of all) leaves the
// server to the others: past --max-per-peer (32) it is refused, another address is served.
TEST(ServeCli, OneAddressCannotHoldEveryConnection) {
  const TinySweep f = trained_sweep(1, "peer");
  const Server server = start_server(f.db, f.dir);
  StopOnExit stop(server.pid);
  ASSERT_NE(server.port, 0);
  std::vector<int> idle;
  for (int i = 0; i < 256; ++i) idle.push_back(connect_to(server.port));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // all accepted (or refused)
  const Reply refused = get(server.port, "/");
  EXPECT_EQ(refused.status, 503);
  EXPECT_NE(refused.body.find("too many connections from 127.0.0.1 (at most 32)"),
            std::string::npos)
      << refused.body;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(get(server.port, "/sweep/tiny", "127.0.0.2").status, 200);
  std::printf("another address served in %.3f s while 127.0.0.1 held 256 connections\n",
              seconds_since(start));
  std::fflush(stdout);  // before a child is forked
  for (int fd : idle) ::close(fd);
  const Result bad = run_amptune({"serve", "--db", f.db, "--max-per-peer", "0"}, f.dir);
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
}

// Removes a test's scratch directory when the test ends (a database of 100,000 crafted runs is
// 400 MB); declared before the server, so the server has ended first.
struct RemoveOnExit {
  std::string dir;
  ~RemoveOnExit() {
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
};

// The slow page of these tests: the last run of a fork chain 100,000 deep, whose lineage walks
// every ancestor (seconds of queries).
std::string chain_db(const std::string& tag) {
  const TinySweep f = trained_sweep(1, tag);
  clone_run(f.db, 100000, true);
  return f.db;
}

// Pages render on their own threads under a bound: a page past --page-seconds is 503 and says
// so; the pages of clients that left stop; meanwhile other clients are answered.
TEST(ServeCli, SlowAndAbandonedPagesLeaveTheServerToOtherClients) {
  const std::string db = chain_db("slow");
  const std::string dir = fs::path(db).parent_path().string();
  const RemoveOnExit remove{fs::path(db).parent_path().parent_path().string()};
  const Server server = start_server(db, dir, {"--page-seconds", "2"});
  StopOnExit stop(server.pid);
  ASSERT_NE(server.port, 0);
  const std::string slow = "/run/100001?part=live";
  auto start = std::chrono::steady_clock::now();
  const Reply late = get(server.port, slow);
  const double late_seconds = seconds_since(start);
  EXPECT_EQ(late.status, 503) << late.head << late.body.substr(0, 400);
  EXPECT_NE(late.body.find("this page took longer than 2 s to render"), std::string::npos)
      << late.body.substr(0, 400);
  EXPECT_LT(late_seconds, 4.0);
  std::printf("a 100,000-deep fork chain's run page: 503 after %.2f s\n", late_seconds);
  std::fflush(stdout);
  // Three slow pages of one client render (it may hold 3 of the 4 threads) while another
  // client's pages are answered, each before any slow one: no slow page has an answer yet when
  // the fifth fast one is in (no timing assumed; the times are printed for docs/SERVE.md).
  std::vector<int> busy;
  for (int i = 0; i < 3; ++i) busy.push_back(send_get(server.port, slow));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  double worst = 0;
  for (int i = 0; i < 5; ++i) {
    start = std::chrono::steady_clock::now();
    EXPECT_EQ(get(server.port, "/run/1", "127.0.0.2").status, 200);
    worst = std::max(worst, seconds_since(start));
  }
  std::printf("another client's run page while 3 slow pages render: at most %.3f s\n", worst);
  for (int fd : busy) {
    pollfd p{fd, POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 0), 0) << "a slow page was answered before the other client's";
  }
  for (int fd : busy) EXPECT_EQ(parse(read_all(fd)).status, 503);
  // Four slow pages whose clients leave at once: their renders stop, and the same client's next
  // page is answered before a slow page's bound (2 s) could have freed a thread.
  for (int i = 0; i < 4; ++i) ::close(send_get(server.port, slow));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  start = std::chrono::steady_clock::now();
  EXPECT_EQ(get(server.port, "/run/1").status, 200);
  const double after_left = seconds_since(start);
  std::printf("a page after 4 slow pages' clients left: %.3f s\n", after_left);
  std::fflush(stdout);
  EXPECT_LT(after_left, 2.0);
  const Result bad = run_amptune({"serve", "--db", db, "--page-seconds", "0"}, dir);
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
}

// A queue of one page behind one render thread: the next page is 503 with a message, and the
// connection it came on answers its next request.
TEST(ServeCli, AFullRenderQueueIs503AndTheConnectionGoesOn) {
  const std::string db = chain_db("queue");
  const std::string dir = fs::path(db).parent_path().string();
  const RemoveOnExit remove{fs::path(db).parent_path().parent_path().string()};
  const Server server = start_server(
      db, dir, {"--render-threads", "1", "--max-queued", "1", "--page-seconds", "3"});
  StopOnExit stop(server.pid);
  ASSERT_NE(server.port, 0);
  const int rendering = send_get(server.port, "/run/100001?part=live");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const int waiting = send_get(server.port, "/run/100001?part=live", "127.0.0.2");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const int fd = connect_to(server.port, "127.0.0.3");
  send_all(fd, "GET /run/1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  char buffer[4096];
  const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
  const Reply busy = parse(std::string(buffer, n > 0 ? n : 0));
  EXPECT_EQ(busy.status, 503) << busy.head;
  EXPECT_NE(busy.body.find("busy: 1 pages wait to be rendered"), std::string::npos) << busy.body;
  EXPECT_NE(busy.head.find("Retry-After: 2"), std::string::npos);
  for (int slow : {rendering, waiting}) EXPECT_EQ(parse(read_all(slow)).status, 503);
  send_all(fd, "GET /run/1 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(parse(read_all(fd)).status, 200);
}

// A sweep of 100,000 runs: a page of kPageRows runs (only those read) with a link to the next,
// and the commands that compare them all; the page is a bounded size. The sweeps page counts
// the runs without reading them.
TEST(ServeCli, ASweepOf100000RunsIsPaged) {
  const TinySweep f = trained_sweep(1, "paged");
  const RemoveOnExit remove{f.dir};
  clone_run(f.db, 100000, false);
  const Server server = start_server(f.db, f.dir);
  StopOnExit stop(server.pid);
  ASSERT_NE(server.port, 0);
  const auto start = std::chrono::steady_clock::now();
  const Reply page = get(server.port, "/sweep/tiny");
  const double seconds = seconds_since(start);
  ASSERT_EQ(page.status, 200) << page.head << page.body.substr(0, 400);
  EXPECT_NE(page.body.find("Runs 1-500 of 100001."), std::string::npos);
  EXPECT_NE(page.body.find("100001 runs: more than a page compares (5000)."), std::string::npos);
  EXPECT_NE(page.body.find("<a href=\"/sweep/tiny?from=500\">next 500</a>"), std::string::npos);
  EXPECT_LT(page.body.size(), 2u << 20) << "a page of 500 runs";
  const Reply last = get(server.port, "/sweep/tiny?from=100000");
  EXPECT_NE(last.body.find("Runs 100001-100001 of 100001."), std::string::npos);
  EXPECT_NE(last.body.find("href=\"/run/100001\""), std::string::npos);
  EXPECT_EQ(get(server.port, "/sweep/tiny?from=x").status, 400);
  const Reply tune = get(server.port, "/sweep/tiny/tune");
  EXPECT_EQ(tune.status, 200);
  EXPECT_NE(tune.body.find("100001 runs: more than a page reads for a search's tree (5000)."),
            std::string::npos);
  // The sweeps page lists them with their run counts (their status would read every run).
  const Reply index = get(server.port, "/");
  EXPECT_EQ(index.status, 200);
  EXPECT_NE(index.body.find("<a href=\"/sweep/tiny\">tiny</a></td><td>100001</td>"),
            std::string::npos)
      << index.body.substr(0, 2000);
  std::printf("a sweep page of 100,001 runs: %.2f s, %zu bytes; server peak %ld kB\n", seconds,
              page.body.size(), peak_kb(server.pid));
}

// A database value the store refuses (a run's axes nested 300,000 deep, as a copied database
// can hold) is 503 naming it, and the server goes on.
TEST(ServeCli, ARefusedDatabaseValueIs503AndTheServerGoesOn) {
  const TinySweep f = trained_sweep(1, "refused");
  exec_sql(f.db, "PRAGMA ignore_check_constraints = 1; UPDATE runs SET axes_json = '{\"a\":' || "
                 "replace(hex(zeroblob(300000)), '00', '[') || "
                 "replace(hex(zeroblob(300000)), '00', ']') || '}' WHERE id = 1");
  const Server server = start_server(f.db, f.dir);
  StopOnExit stop(server.pid);
  ASSERT_NE(server.port, 0);
  for (const char* target : {"/sweep/tiny", "/sweep/tiny?part=live"}) {
    const Reply r = get(server.port, target);
    EXPECT_EQ(r.status, 503) << target << "\n" << r.head << r.body.substr(0, 400);
    EXPECT_NE(r.body.find("Database not readable"), std::string::npos) << r.body.substr(0, 400);
  }
  // Still serving (every page that reads run 1 says the same; one that does not is answered).
  EXPECT_EQ(get(server.port, "/nope").status, 404);
  EXPECT_EQ(get(server.port, "/sweep/tiny").status, 503);
  EXPECT_EQ(::kill(server.pid, 0), 0);
}

// --- a real browser -----------------------------------------------------------------------------

std::string chromium() {
  for (const char* name : {"chromium", "chromium-browser"}) {
    for (const char* dir : {"/usr/bin/", "/usr/local/bin/", "/snap/bin/"}) {
      const std::string path = std::string(dir) + name;
      if (::access(path.c_str(), X_OK) == 0) return path;
    }
  }
  return "";
}

// Runs headless Chromium with `args` (the browser's output to dir/<stem>.out); its exit code.
int run_chromium(const std::string& dir, const std::string& stem, std::vector<std::string> args) {
  std::vector<std::string> argv = {
      chromium(),      "--headless",     "--no-sandbox",
      "--disable-gpu", "--no-first-run", "--user-data-dir=" + dir + "/chromium-" + stem};
  argv.insert(argv.end(), args.begin(), args.end());
  const pid_t pid = spawn_program(argv, dir, SpawnOptions({}, stem));
  StopOnExit stop(pid);
  return wait_exit_code(pid, 120);
}

TEST(ServeBrowser, ChromiumShowsARunsCurvesAndItsStoredNumbersAndPollsTheLivePart) {
  ASSERT_FALSE(chromium().empty()) << "the browser test needs Debian's chromium (tools/test.sh "
                                      "installs it: apt install chromium)";
  const TinySweep f = trained_sweep(3, "browser");
  const Server server = start_server(f.db, f.dir);
  StopOnExit stop(server.pid);
  ASSERT_NE(server.port, 0);
  const std::string base = "http://127.0.0.1:" + std::to_string(server.port);
  // --virtual-time-budget lets the page's timers run: its first poll of ?part=live is 2 s in.
  ASSERT_EQ(
      run_chromium(f.dir, "dom", {"--virtual-time-budget=8000", "--dump-dom", base + "/run/1"}), 0)
      << read_file(f.dir + "/dom.err");
  const std::string dom = read_file(f.dir + "/dom.out");
  ASSERT_NE(dom.find("<main id=\"live\">"), std::string::npos) << dom.substr(0, 2000);
  EXPECT_NE(dom.find("live: updated"), std::string::npos) << "the page's script did not poll";
  for (const char* plot : {"metric", "train_loss", "loss_scale", "img_s"}) {
    EXPECT_NE(dom.find(std::string("data-plot=\"") + plot + "\"><svg"), std::string::npos) << plot;
  }
  EXPECT_NE(dom.find("<polyline"), std::string::npos);
  const auto epochs = epochs_of(f.db, "1");
  ASSERT_EQ(epochs.size(), 3u);
  for (const auto& e : epochs) {
    char loss[32], acc[32];
    std::snprintf(loss, sizeof loss, "%.6g", e.train_loss);
    std::snprintf(acc, sizeof acc, "%.6g", e.metrics.at("acc1"));
    // In the epochs table and as the points of the curves.
    EXPECT_NE(dom.find("<td>" + std::string(loss) + "</td>"), std::string::npos) << loss;
    EXPECT_NE(dom.find("epoch " + std::to_string(e.epoch) + ": " + loss + "</title>"),
              std::string::npos)
        << loss;
    EXPECT_NE(dom.find("epoch " + std::to_string(e.epoch) + ": " + acc + "</title>"),
              std::string::npos)
        << acc;
  }
  // A screenshot of the sweep page (docs/SERVE.md shows one made the same way).
  ASSERT_EQ(run_chromium(f.dir, "shot",
                         {"--hide-scrollbars", "--window-size=1100,1400",
                          "--screenshot=" + f.dir + "/sweep.png", base + "/sweep/tiny"}),
            0)
      << read_file(f.dir + "/shot.err");
  EXPECT_EQ(read_file(f.dir + "/sweep.png").substr(0, 8), "\x89PNG\r\n\x1a\n");
}

}  // namespace
}  // namespace amptune::testing
