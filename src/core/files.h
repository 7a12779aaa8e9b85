// Writing a file so that a reader, or a crash, sees either the old content or the new, never a
// part: the one way amptune writes a file it may write again (checkpoints, exported weights, a
// checkpoint folder's owner file, a report's index.html, Slurm job scripts, profile traces).
#pragma once

#include <string>
#include <string_view>

namespace amptune {

// Writes `bytes` to `path`: missing parent directories are created, the bytes go to a temp file
// beside the target ("<path>.tmp.<pid>"; a file or link of that name, left by a dead process of
// this pid or planted, is removed first, never followed), which is created with O_EXCL |
// O_NOFOLLOW, fsynced, renamed over `path`, and the directory fsynced so the rename survives a
// crash. A link at `path` itself is replaced, not written through. On any failure the temp file
// is removed, `path` keeps its old content, and EnvironmentError names the path, the step and
// the reason ("cannot write results/x.tmp.42: No space left on device (check free disk space
// and permissions)"); callers that have a kind of their own (a checkpoint) add it.
void write_file_atomic(const std::string& path, std::string_view bytes);

// The temp file name write_file_atomic uses for `path` in a process of id `pid`.
std::string atomic_temp_name(const std::string& path, long pid);

}  // namespace amptune
