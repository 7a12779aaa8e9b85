// Plain log lines on stderr: "amptune: <message>" / "amptune: warning: <message>".
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace amptune::log {
void info(const std::string& message);
void warn(const std::string& message);
void set_quiet(bool quiet);  // info lines off (warnings stay)

// `text` with every control character written as an escape, so text that came from elsewhere (a
// merged database, a checkpoint's tensor names and metadata, a sweep file) cannot move the
// terminal's cursor, change its colours, retitle the window or fake a line: C0 controls (below
// 0x20) and DEL as \xNN, C1 controls (U+0080 - U+009F, which terminals also obey) as \u00NN,
// and bytes that are not valid UTF-8 (stray or truncated sequences, overlong forms, surrogates,
// beyond U+10FFFF) as \xNN each; valid UTF-8 otherwise passes unchanged. With `keep_lines`, line
// breaks and tabs stay (messages of several lines). The sinks print through it: info and warn
// (keep_lines), tables (every cell), and the cli's stdout / stderr (cli/terminal.h).
std::string printable(const std::string& text, bool keep_lines = false);

// The most bytes of a message that is stored (runs.message) or of a piece of a file's or a
// database's text quoted in a message (docs/SECURITY.md "Checkpoints"): enough for any message
// amptune writes itself and any name it gives, small enough that a hostile file cannot turn one
// error into megabytes of output or of database.
constexpr size_t kMessageBytes = 4096;
constexpr size_t kQuotedBytes = 256;

// `text` whole when it has at most `max_bytes` bytes; else its first `max_bytes` bytes (fewer
// where the cut would split a UTF-8 character) and "... (N bytes cut)". For text from elsewhere
// (a tensor name, a metadata value, a stored message) put into a message.
std::string clipped(std::string_view text, size_t max_bytes);
}  // namespace amptune::log
