#pragma once
#include <string>
#include <string_view>

namespace amptune {
// Lower-case hex sha256 (64 characters) of `bytes`.
std::string sha256_hex(std::string_view bytes);
// sha256 of a file's contents, read in 64 KiB chunks; throws EnvironmentError when the file
// cannot be opened or read (callers add their own context, e.g. CheckpointError).
std::string sha256_file(const std::string& path);
}  // namespace amptune
