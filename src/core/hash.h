#pragma once
#include <string>
#include <string_view>

namespace amptune {
std::string sha256_hex(std::string_view bytes);
// sha256 of a file's contents; throws Error when the file cannot be read.
std::string sha256_file(const std::string& path);
}  // namespace amptune
