// Plain log lines on stderr: "amptune: <message>" / "amptune: warning: <message>".
#pragma once
#include <string>

namespace amptune::log {
void info(const std::string& message);
void warn(const std::string& message);
void set_quiet(bool quiet);  // info lines off (warnings stay)
}  // namespace amptune::log
