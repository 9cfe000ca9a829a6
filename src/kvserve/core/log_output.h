// Where log lines go: spdlog's default logger writes to stdout; commands send their results there,
// so the command line moves the log to stderr first thing (`kvserve generate ... > out.txt` holds
// only results). The level stays what --log-level sets (core/logging.h).
#pragma once

namespace kvserve {

void log_to_stderr();

}  // namespace kvserve
