// Plain log lines on stderr: "amptune: <message>" / "amptune: warning: <message>".
#pragma once
#include <string>

namespace amptune::log {
void info(const std::string& message);
void warn(const std::string& message);
void set_quiet(bool quiet);  // info lines off (warnings stay)

// `text` with every control character (below 0x20, and DEL) written as \xNN, so a name that came
// from elsewhere (a merged database, a sweep file) cannot move the terminal's cursor, change its
// colours or fake a line. With `keep_lines`, line breaks and tabs stay (messages of several
// lines). info and warn print their messages through it with keep_lines; tables print every cell
// through it.
std::string printable(const std::string& text, bool keep_lines = false);
}  // namespace amptune::log
