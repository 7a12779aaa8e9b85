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
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "integration/harness.h"

namespace amptune::testing {
namespace {

// --- a client -----------------------------------------------------------------------------------

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
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
Reply http_exchange(int port, const std::string& request) {
  const int fd = connect_to(port);
  if (fd < 0) return {};
  send_all(fd, request);
  return parse(read_all(fd));
}

Reply get(int port, const std::string& target) {
  return http_exchange(
      port, "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
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
      http_exchange(server.port, "HEAD / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
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
  const Server server = start_server(f.db, f.dir);
  StopOnExit stop(server.pid);
  ASSERT_NE(server.port, 0);
  EXPECT_EQ(get(server.port, "/sweep/tiny").status, 200);
  const long before = peak_kb(server.pid);
  std::vector<int> fds;
  for (int i = 0; i < 200; ++i) fds.push_back(connect_to(server.port));
  for (int fd : fds) {
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(send_all(fd, "GET /sweep/tiny HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
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
