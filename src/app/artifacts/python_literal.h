// Python source literals of values that come from outside amptune's code (a results database is
// input: docs/SECURITY.md), for the modules amptune generates (app/artifacts/setting_export.h):
// a value becomes one literal that Python reads back as exactly that value, and text around it
// (a comment, the rest of the file) cannot be reached from inside it. No torch.
//
//   python_string("conv1\"\n")  -> "conv1\"\n" as the 12 characters  "conv1\"\n"
//   python_float(1024)          -> 1024.0
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace amptune::app {

// Whether `text` is well-formed UTF-8 (no overlong forms, no surrogates, at most U+10FFFF).
bool valid_utf8(std::string_view text);

// `text` (UTF-8) as a double-quoted Python 3 str literal of printable ASCII only: `"` and `\`
// escaped, every other character outside 0x20-0x7e as \xNN, \uNNNN or \UNNNNNNNN (a newline, a
// carriage return, NUL, U+2028, non-ASCII letters alike), so the literal is one line and means
// the same whatever the file's encoding declaration. Throws ConfigError for text that is not
// UTF-8 (`what` names the value in the message).
std::string python_string(std::string_view text, const std::string& what);

// A finite double as a Python float literal that reads back as the same double (the shortest
// round-trip digits, ".0" added to an integral value: 1024.0, 0.1, 1e+20). Throws ConfigError
// naming `what` for NaN or an infinity.
std::string python_float(double value, const std::string& what);

std::string python_int(int64_t value);
std::string python_bool(bool value);  // True / False

}  // namespace amptune::app
