// One table of names for an enum class (core/words.h, records/records.h): the value -> word for
// writing and printing, the word -> value for reading, so the two directions cannot drift.
//
//   const NameTable<Dtype, 2> kDtype = {{{Dtype::kFp16, "fp16"}, {Dtype::kBf16, "bf16"}}};
//   name_in(kDtype, Dtype::kBf16) == "bf16";  value_in(kDtype, "fp8") == std::nullopt
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

namespace amptune {

template <class E, size_t N>
using NameTable = std::array<std::pair<E, const char*>, N>;

// The word of `value`; std::logic_error (a bug: exit 1) for a value the table lacks.
template <class E, size_t N>
std::string name_in(const NameTable<E, N>& names, E value) {
  for (const auto& [v, name] : names) {
    if (v == value) return name;
  }
  throw std::logic_error("no name for value " + std::to_string(static_cast<int>(value)));
}

// The value named exactly `text`; unset for any other word.
template <class E, size_t N>
std::optional<E> value_in(const NameTable<E, N>& names, const std::string& text) {
  for (const auto& [v, name] : names) {
    if (text == name) return v;
  }
  return std::nullopt;
}

}  // namespace amptune
