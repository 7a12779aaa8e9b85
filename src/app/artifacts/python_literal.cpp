#include "app/artifacts/python_literal.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace amptune::app {
namespace {

// The code point of the UTF-8 sequence at text[*at] (advancing *at past it); -1 when the bytes
// there are not a well-formed sequence.
long next_code_point(std::string_view text, size_t* at) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(*at);
  if (lead < 0x80) {
    ++*at;
    return lead;
  }
  // The sequence's length, the lead byte's payload and the least code point of that length.
  struct Form {
    unsigned char mask, marker, payload;
    size_t length;
    long min;
  };
  constexpr Form kForms[] = {
      {0xe0, 0xc0, 0x1f, 2, 0x80}, {0xf0, 0xe0, 0x0f, 3, 0x800}, {0xf8, 0xf0, 0x07, 4, 0x10000}};
  for (const Form& form : kForms) {
    if ((lead & form.mask) != form.marker) continue;
    if (*at + form.length > text.size()) return -1;
    long cp = lead & form.payload;
    for (size_t i = 1; i < form.length; ++i) {
      if ((byte(*at + i) & 0xc0) != 0x80) return -1;
      cp = (cp << 6) | (byte(*at + i) & 0x3f);
    }
    if (cp < form.min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return -1;
    *at += form.length;
    return cp;
  }
  return -1;
}

}  // namespace

bool valid_utf8(std::string_view text) {
  for (size_t at = 0; at < text.size();) {
    if (next_code_point(text, &at) < 0) return false;
  }
  return true;
}

std::string python_string(std::string_view text, const std::string& what) {
  std::string out = "\"";
  for (size_t at = 0; at < text.size();) {
    const long cp = next_code_point(text, &at);
    if (cp < 0)
      throw ConfigError(what + " is not valid UTF-8: it cannot be written as Python text");
    char escape[16];
    if (cp == '"' || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp >= 0x20 && cp <= 0x7e) {
      out += static_cast<char>(cp);
    } else {
      const char* format = cp <= 0xff ? "\\x%02lx" : cp <= 0xffff ? "\\u%04lx" : "\\U%08lx";
      std::snprintf(escape, sizeof escape, format, cp);
      out += escape;
    }
  }
  return out + "\"";
}

std::string python_float(double value, const std::string& what) {
  if (!std::isfinite(value)) {
    throw ConfigError(what + " is " + (std::isnan(value) ? "NaN" : "infinite") +
                      ": only finite numbers are written");
  }
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  std::string text(buffer, result.ptr);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

std::string python_int(int64_t value) { return std::to_string(value); }

std::string python_bool(bool value) { return value ? "True" : "False"; }

}  // namespace amptune::app
