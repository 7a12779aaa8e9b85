// What amptune prints reaches the terminal escaped. Messages and tables carry text from files and
// databases (run, sweep and metric names, labels, messages, checkpoint tensor names and metadata,
// YAML keys): a control character in one could move the cursor, recolour the screen, retitle the
// window or fake a line. Every byte written to std::cout and std::cerr goes through
// log::printable (line breaks and tabs kept, and "\r\n", the line end of CSV), so no printing path
// can miss it. log::info / warn print through it on their own (C stdio); the trainer's progress
// line (C stdio, "\r" on a terminal) is amptune's own text.
//
//   int main(...) {
//     cli::EscapedTerminal escaped;  // from here to the end of its scope
//     std::cout << run.name;         // "r\x1b[31m" prints as r\x1b[31m
//   }
#pragma once

#include <memory>
#include <streambuf>

namespace amptune::cli {

class EscapedTerminal {
 public:
  EscapedTerminal();   // std::cout and std::cerr write through an escaping buffer
  ~EscapedTerminal();  // flushes it and puts the streams' own buffers back
  EscapedTerminal(const EscapedTerminal&) = delete;
  EscapedTerminal& operator=(const EscapedTerminal&) = delete;

 private:
  std::unique_ptr<std::streambuf> out_, err_;
  std::streambuf* saved_out_ = nullptr;
  std::streambuf* saved_err_ = nullptr;
};

}  // namespace amptune::cli
