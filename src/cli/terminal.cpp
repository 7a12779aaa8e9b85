#include "cli/terminal.h"

#include <iostream>
#include <string>

#include "core/log.h"

namespace amptune::cli {
namespace {

// Holds what is written until a line ends (or the stream is flushed), then passes it on through
// log::printable: a line at a time, so a UTF-8 character written in pieces is seen whole.
class EscapingBuffer : public std::streambuf {
 public:
  explicit EscapingBuffer(std::streambuf* sink) : sink_(sink) {}

 protected:
  int_type overflow(int_type ch) override {
    if (traits_type::eq_int_type(ch, traits_type::eof())) return traits_type::not_eof(ch);
    const char c = traits_type::to_char_type(ch);
    pending_ += c;
    if (c == '\n') pass_on();
    return ch;
  }
  std::streamsize xsputn(const char* text, std::streamsize n) override {
    pending_.append(text, static_cast<size_t>(n));
    if (pending_.find('\n', pending_.size() - static_cast<size_t>(n)) != std::string::npos) {
      pass_on();
    }
    return n;
  }
  int sync() override {
    pass_on();
    return sink_->pubsync();
  }

 private:
  // Everything pending, escaped; "\r\n" (CSV's line end) stays as it is.
  void pass_on() {
    std::string out;
    size_t from = 0;
    for (size_t at; (at = pending_.find("\r\n", from)) != std::string::npos; from = at + 2) {
      out += log::printable(pending_.substr(from, at - from), /*keep_lines=*/true) + "\r\n";
    }
    out += log::printable(pending_.substr(from), /*keep_lines=*/true);
    pending_.clear();
    sink_->sputn(out.data(), static_cast<std::streamsize>(out.size()));
  }

  std::streambuf* sink_;
  std::string pending_;
};

}  // namespace

EscapedTerminal::EscapedTerminal()
    : out_(std::make_unique<EscapingBuffer>(std::cout.rdbuf())),
      err_(std::make_unique<EscapingBuffer>(std::cerr.rdbuf())) {
  saved_out_ = std::cout.rdbuf(out_.get());
  saved_err_ = std::cerr.rdbuf(err_.get());
}

EscapedTerminal::~EscapedTerminal() {
  std::cout.flush();
  std::cerr.flush();
  std::cout.rdbuf(saved_out_);
  std::cerr.rdbuf(saved_err_);
}

}  // namespace amptune::cli
