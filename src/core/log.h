// Plain log lines on stderr: "amptune: <message>" / "amptune: warning: <message>".
#pragma once
#include <string>

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
}  // namespace amptune::log
