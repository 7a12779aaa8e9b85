#pragma once
#include <string>
#include <string_view>

namespace amptune {
// Lower-case hex sha256 (64 characters) of `bytes`.
std::string sha256_hex(std::string_view bytes);
// sha256 of a file's contents, read in 64 KiB chunks; throws EnvironmentError when the file
// cannot be opened or read (callers add their own context, e.g. CheckpointError).
std::string sha256_file(const std::string& path);

// Fingerprints of what a run reads (docs/CONFIG.md "Identity"): they depend on the contents and
// the names below the given path, never on the path itself, so a copy elsewhere has the same one.
// Both throw DataError when the path is missing or unreadable.
//  - A file: sha256 of "file <size>" and its contents; a file above 64 MiB contributes 16
//    evenly spaced 1 MiB pieces instead of every byte (a weights file, a large archive).
//  - A folder: sha256 of the sorted list "relative/path <size>" of every regular file below it
//    (links followed), and of the first 64 KiB of up to 64 of those files spread evenly over the
//    list. A renamed, added, removed or resized file changes it; a changed byte is seen when it
//    lies in a sampled piece.
std::string fingerprint_file(const std::string& path);
std::string fingerprint_tree(const std::string& path);
}  // namespace amptune
