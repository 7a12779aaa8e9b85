#pragma once
namespace amptune {
extern const char* const kVersion;    // project version (CMakeLists.txt)
extern const char* const kGitCommit;  // short commit of the build, "unknown" outside git
extern const bool kGitDirty;          // tracked files differed from that commit
}  // namespace amptune
